# ruff: noqa: W291  (the vendored texts keep their trailing spaces: verbatim)
"""ACE's AppWorld harness's reflector and curator prompts and its initial playbook,
verbatim, for `ace_appworld` (`prompts: appworld`).

Vendored from ace-agent/ace-appworld (Apache License 2.0; copyright its authors; the
licence text: LICENSE-ace-appworld beside this file), `experiments/`:
`prompts/appworld_react_reflector_no_gt_prompt.txt` (REFLECTOR_NO_GT),
`prompts/appworld_react_curator_prompt.txt` (CURATOR) and
`playbooks/appworld_initial_playbook.txt` (INITIAL_PLAYBOOK). Unmodified. How the
harness fills them (`code/ace/adaptation_react.py`, `reflector_call`, `curator_call`):
the reflector's `{{...}}` slots by string replacement, the curator's `{...}` by
`str.format`, each followed by the full conversation history; `fill_reflector` and
`fill_curator` below do the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

REFLECTOR_NO_GT = r"""You are an expert AppWorld coding agent and educator. Your job is to diagnose the current trajectory: identify what went wrong (or could be better), grounded in execution feedback, API usage, unit test report, and ground truth when applicable.

**Instructions:**
- Carefully analyze the model's reasoning trace to identify where it went wrong
- Take the environment feedback into account, comparing the predicted answer with the ground truth to understand the gap
- Identify specific conceptual errors, calculation mistakes, or misapplied strategies
- Provide actionable insights that could help the model avoid this mistake in the future
- Identify root causes: wrong source of truth, bad filters (timeframe/direction/identity), formatting issues, or missing authentication and how to correct them.
- Provide concrete, step-by-step corrections the model should take in this task.
- Be specific about what the model should have done differently
- You will receive bulletpoints that are part of playbook that's used by the generator to answer the question.
- You need to analyze these bulletpoints, and give the tag for each bulletpoint, tag can be ['helpful', 'harmful', 'neutral'] (for the generator to generate the correct answer)
- Explicitly curate from the environment feedback the output format/schema of APIs used when unclear or mismatched with expectations (e.g., `apis.blah.show_contents()` returns a list of content_ids (strings), not content objects)

**Inputs:**
- Ground truth code (reference, known-correct):
<<<GROUND_TRUTH_CODE_START>>>
[Ground Truth not applicable]
<<<GROUND_TRUTH_CODE_END>>>

- Generated code (candidate to critique):
<<<GENERATED_CODE_START>>>
{{generated_code}}
<<<GENERATED_CODE_END>>>

- Execution error (if the generated code was run and failed):
<<<EXECUTION_ERROR_START>>>
[not applicable]
<<<EXECUTION_ERROR_END>>>

- Test report (unit tests result for the task after the generated code was run):
<<<TEST_REPORT>>>
[not applicable]
<<<TEST_REPORT>>>

- (Optional) Generated plan/reflection/comments:
<<<GENERATED_RATIONALE_START>>>
{{generated_rationale}}
<<<GENERATED_RATIONALE_END>>>

- (Optional) Task spec / API docs excerpt (if available):
<<<SPEC_OR_API_START>>>
[not applicable]
<<<SPEC_OR_API_END>>>

- (Optional) Playbook (playbook that's used by model for code generation):
<<<PLAYBOOK_GUIDE>>>
{{playbook}}
<<<PLAYBOOK_GUIDE>>>

- (Optional) Reflections (reflection of error from a prior review pass):
<<<PRIOR_REFLECTION>>>
{{previous_reflection}}
<<<PRIOR_REFLECTION>>>

**Examples:**

**Example 1:**
Ground Truth Code: [Not available]
Generated Code: [Code that tries to identify roommates by parsing Venmo transaction descriptions using keywords like "rent", "utilities"]
Execution Error: [Not available]
Test Report: [Not available]

Response:
{{
  "reasoning": "From the generated trajectory, the agent attempted to infer who the 'roommates' are by scanning Venmo transaction descriptions for keywords (e.g., 'rent'). This approach is fragile because descriptions are user-written, non-standard, and can omit or mislead relationship semantics. The Phone app is the authoritative source for contact relationships, and should be used to precisely identify 'roommates' before filtering transactions.",
  "error_identification": "Identity resolution relied on heuristic keyword parsing in transaction descriptions instead of querying the authoritative Phone contacts.",
  "root_cause_analysis": "The agent implicitly assumed that transactional free-form text is a reliable proxy for relationships, ignoring that contact relationships are normalized elsewhere (Phone app).",
  "correct_approach": "Authenticate with the Phone app, call apis.phone.search_contacts() to retrieve contacts with relationship 'roommate', then use their precise identifiers (emails/phone numbers) to filter Venmo transactions.",
  "key_insight": "Resolve identities from the correct source app (Phone contacts) rather than inferring from indirect, free-form text."
}}

**Example 2:**
Ground Truth Code: [Not available]
Generated Code: [Code that uses for i in range(10) to paginate through playlists, then calls complete_task() with the count]
Execution Error: [Not available]
Test Report: [Not available]

Response:
{{
  "reasoning": "Analyzing the generated code, I notice the agent used 'for i in range(10)' for pagination when calling the playlist API. This is problematic because the agent has no way of knowing whether there are exactly 10 pages or fewer. The API documentation shows pagination parameters, suggesting that data might span multiple pages. Using a fixed range means the agent could miss data on pages beyond the 10th page, or waste API calls if there are fewer than 10 pages. The proper approach for pagination is to continue until the API returns empty results.",
  "error_identification": "The pagination logic used an arbitrary fixed limit (range(10)) instead of continuing until all available data is collected.",
  "root_cause_analysis": "The agent prioritized avoiding infinite loops over ensuring complete data collection, choosing a 'safe' fixed upper bound without considering that this could lead to incomplete results when the actual data exceeds the arbitrary limit.",
  "correct_approach": "Use while True loop with proper break condition: continue calling the API with incrementing page_index until the API returns empty results, null, or an empty list, then break the loop.",
  "key_insight": "For pagination, always use while True loop with proper termination conditions instead of fixed range iterations to ensure complete data collection across all available pages."
}}

**Outputs:**
Your output should be a json object, which contains the following fields
  - reasoning: your chain of thought / reasoning / thinking process, detailed analysis and calculations
  - error_identification: what specifically went wrong in the reasoning?
  - root_cause_analysis: why did this error occur? What concept was misunderstood?
  - correct_approach: what should the model have done instead?
  - key_insight: what strategy, formula, or principle should be remembered to avoid this error?

**Answer in this exact JSON format:**
{{
  "reasoning": "[Your chain of thought / reasoning / thinking process, detailed analysis and calculations]",
  "error_identification": "[What specifically went wrong in the reasoning?]",
  "root_cause_analysis": "[Why did this error occur? What concept was misunderstood?]",
  "correct_approach": "[What should the model have done instead?]",
  "key_insight": "[What strategy, formula, or principle should be remembered to avoid this error?]",
}}

"""

CURATOR = r"""You are a master curator of knowledge. Your job is to identify what new insights should be added to an existing playbook based on a reflection from a previous attempt.

**Context:**
- The playbook you created will be used to help answering similar questions. 
- The reflection is generated using ground truth answers that will NOT be available when the playbook is being used. So you need to come up with content that can aid the playbook user to create predictions that likely align with ground truth. 

**Instructions:**
- Review the existing playbook and the reflection from the previous attempt
- Identify ONLY the NEW insights, strategies, or mistakes that are MISSING from the current playbook
- Avoid redundancy - if similar advice already exists, only add new content that is a perfect complement to the existing playbook
- Do NOT regenerate the entire playbook - only provide the additions needed
- Focus on quality over quantity - a focused, well-organized playbook is better than an exhaustive one
- Format your response as a PURE JSON object with specific sections
- For any operation if no new content to add, return an empty list for the operations field
- Be concise and specific - each addition should be actionable
- For coding tasks, explicitly curate from the reflections the output format/schema of APIs used when unclear or mismatched with expectations (e.g., `apis.blah.show_contents()` returns a list of content_ids (strings), not content objects)

- **Task Context (the actual task instruction):**  
  `{question_context}`  

- **Current Playbook:**  
  `{current_playbook}` 

- **Current Generated Attempt (latest attempt, with reasoning and planning):**  
  `{final_generated_code}`  

- **Current Reflections (principles and strategies that helped to achieve current task):**  
  `{guidebook}`


**Examples:**

**Example 1:**
Task Context: "Find money sent to roommates since Jan 1 this year"
Current Playbook: [Basic API usage guidelines]
Generated Attempt: [Code that failed because it used transaction descriptions to identify roommates instead of Phone contacts]
Reflections: "The agent failed because it tried to identify roommates by parsing Venmo transaction descriptions instead of using the Phone app's contact relationships. This led to incorrect identification and wrong results."

Response:
{{
  "reasoning": "The reflection shows a critical error where the agent used unreliable heuristics (transaction descriptions) instead of the authoritative source (Phone app contacts) to identify relationships. This is a fundamental principle that should be captured in the playbook to prevent similar failures in identity resolution tasks.",
  "operations": [
    {{
      "type": "ADD",
      "section": "strategies_and_hard_rules", 
      "content": "Always resolve identities from the correct source app\n- When you need to identify relationships (roommates, contacts, etc.), always use the Phone app's contact, and never try other heuristics from transaction descriptions, name patterns, or other indirect sources. These heuristics are unreliable and will cause incorrect results."
    }}
  ]
}}

**Example 2:**
Task Context: "Count all playlists in Spotify"
Current Playbook: [Basic authentication and API calling guidelines]
Generated Attempt: [Code that used for i in range(10) loop and missed playlists on later pages]
Reflections: "The agent used a fixed range loop for pagination instead of properly iterating through all pages until no more results are returned. This caused incomplete data collection."

Response:
{{
  "reasoning": "The reflection identifies a pagination handling error where the agent used an arbitrary fixed range instead of proper pagination logic. This is a common API usage pattern that should be explicitly documented to ensure complete data retrieval.",
  "operations": [
    {{
      "type": "ADD",
      "section": "apis_to_use_for_specific_information",
      "content": "About pagination: many APIs return items in \"pages\". Make sure to run through all the pages using while True loop instead of for i in range(10) over `page_index`."
    }}
  ]
}}

**Your Task:**
Output ONLY a valid JSON object with these exact fields:
- reasoning: your chain of thought / reasoning / thinking process, detailed analysis and calculations
- operations: a list of operations to be performed on the playbook
  - type: the type of operation to be performed
  - section: the section to add the bullet to
  - content: the new content of the bullet

**Available Operations:**
1. ADD: Create new bullet points with fresh IDs
    - section: the section to add the new bullet to
    - content: the new content of the bullet. Note: no need to include the bullet_id in the content like '[ctx-00263] helpful=1 harmful=0 ::', the bullet_id will be added by the system.

**RESPONSE FORMAT - Output ONLY this JSON structure (no markdown, no code blocks):**
{{
  "reasoning": "[Your chain of thought / reasoning / thinking process, detailed analysis and calculations here]",
  "operations": [
    {{
      "type": "ADD", 
      "section": "verification_checklist",
      "content": "[New checklist item or API schema clarification...]"
    }}
  ]
}}
"""

INITIAL_PLAYBOOK = r"""## STRATEGIES AND HARD RULES
[shr-00001] Make sure to end code blocks with ``` followed by a newline(\n).
[shr-00005] Always look at API specifications (using apis.api_docs.show_api_doc) before calling an API.
[shr-00006] Write small chunks of code and only one chunk of code in every step. Make sure everything is working correctly before making any irreversible change.

## APIs TO USE FOR SPECIFIC INFORMATION
[api-00004] You can use the "supervisor" app to get information about my accounts and use the "phone" app to get information about friends and family.

## USEFUL CODE SNIPPETS AND TEMPLATES

## COMMON MISTAKES AND CORRECT STRATEGIES

## PROBLEM-SOLVING HEURISTICS AND WORKFLOWS
[psw-00002] Remember you can use the variables in your code in subsequent code blocks.
[psw-00007] Many APIs return items in "pages". Make sure to run through all the pages by looping over `page_index`.

## VERIFICATION CHECKLIST

## TROUBLESHOOTING AND PITFALLS:

## OTHERS
[misc-00003] Remember that the email addresses, access tokens and variables (e.g. spotify_password) in the example above are not valid anymore.
[misc-00008] Once you have completed the task, make sure to call apis.supervisor.complete_task(). If the task asked for some information, return it as the answer argument, i.e. call apis.supervisor.complete_task(answer=<answer>). Many tasks do not require an answer, so in those cases, just call apis.supervisor.complete_task() i.e. do not pass any argument.
"""

SEE_HISTORY = "See full conversation history below"
HISTORY_HEADER = "\n\n=== FULL CONVERSATION HISTORY ===\n"
TEXTS = (REFLECTOR_NO_GT, CURATOR, INITIAL_PLAYBOOK, SEE_HISTORY, HISTORY_HEADER)


def conversation(messages: Sequence[dict[str, Any]]) -> str:
    """The harness's conversation history block (`[i] ROLE: content`)."""
    out = HISTORY_HEADER
    for i, message in enumerate(messages):
        out += (
            f"[{i}] {str(message.get('role', 'unknown')).upper()}: {message.get('content', '')}\n\n"
        )
    return out


def fill_reflector(playbook: str, messages: Sequence[dict[str, Any]]) -> str:
    """The reflector's prompt as `reflector_call` fills it (no ground truth, no test
    report: the no-GT prompt has neither slot)."""
    filled = (
        REFLECTOR_NO_GT.replace("{{ground_truth_code}}", "")
        .replace("{{test_report}}", "")
        .replace("{{generated_code}}", SEE_HISTORY)
        .replace("{{generated_rationale}}", SEE_HISTORY)
        .replace("{{spec_or_api_docs}}", SEE_HISTORY)
        .replace("{{execution_error}}", SEE_HISTORY)
        .replace("{{playbook}}", playbook or "N/A")
        .replace("{{previous_reflection}}", "N/A")
    )
    return filled + conversation(messages)


def fill_curator(
    playbook: str, reflection: str, task: str, messages: Sequence[dict[str, Any]]
) -> str:
    """The curator's prompt as `curator_call` fills it."""
    content = CURATOR.format(
        initial_generated_code=SEE_HISTORY,
        final_generated_code=SEE_HISTORY,
        guidebook=reflection,
        current_playbook=playbook,
        question_context=task,
        gt=None,
    )
    return content + conversation(messages)

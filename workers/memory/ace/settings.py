"""ACE's settings, with the source of each default.

Sources: the original code (ace-agent/ace: `ace/ace.py` `_extract_config_params`,
`_train_single_sample` and `_offline_train`, `ace/core/bulletpoint_analyzer.py`,
`ace/core/generator.py`, `playbook_utils.py`, `utils.py`, `finance/run.py` and
`finance/data/sample_config.json`) and ACE's AppWorld harness
(../shared/vendor/ace-appworld/experiments: `configs/ACE_offline_no_GT_adaptation.jsonnet`, `code/ace/adaptation_agent.py`
`solve_task_wo_gt`, `code/ace/adaptation_react.py` `curator_call`,
`playbooks/appworld_initial_playbook.txt`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from distillery.workers.memory.feedback import DEFAULT_FEEDBACK

# The settings that decide the playbook (the adaptation): the stage's identity.
BUILD_FIELDS = (
    "max_rounds",
    "feedback",
    "curator_frequency",
    "sections",
    "initial_playbook",
    "playbook_token_budget",
    "dedup_threshold",
    "dedup_merge",
    "curator_answer",
    "reflector_reads",
    "playbook_selection",
    "eval_steps",
    "validation_fraction",
    "trajectory_chars",
    "observation_chars",
    # The generator's plays read the playbook as the student does (hooks.py): bounded.
    "playbook_max_chars",
)


# Where the adaptation at the defaults differs from ace.py (the authors' math/finance
# code, whose loop `ace` follows) and why; `prompts: appworld` follows ACE's AppWorld
# harness in each, so it has none. The first two are options (ace.py's choice one
# setting away); a run is tagged with those in effect for its settings
# (`ace_deviations`: `ace_py_deviations`, `Ace.tags`), documented in docs/methods/ace.md.
# - final_playbook (`playbook_selection: final`): the student reads the playbook as
#   adaptation left it, as the AppWorld harness does: its evaluation reads
#   `trained_playbook_file_path`, the file `curator_call` rewrites after every task
#   (ACE_offline_no_GT_{adaptation,evaluation}.jsonnet). ace.py's `_offline_train`
#   plays a validation split every `eval_steps` tasks and keeps the best playbook
#   (`best_on_validation`), which costs ACE the validation part of the memory split and
#   the teacher plays of every validation pass, which no other method gets.
# - reflector_reads_playbook (`reflector_reads: playbook`): the reflector reads the
#   playbook the play read and tags any bullet of it, as the AppWorld harness's
#   (`reflector_call`: `{{playbook}}` is `self.playbook`; its generator cites nothing).
#   ace.py's generator names the bullets it used and its reflector reads only those
#   (`cited_bullets`).
# - curator_reads_attempt: the curator also reads the task and the play's transcript
#   (as the AppWorld harness's `curator_call` does: the instruction as
#   `question_context`, the conversation history appended); ace.py's curator reads the
#   reflection, the playbook and the sample's context, not the attempt. Ours so that it
#   can name the steps and APIs involved. Not an option.
ACE_PY_DEVIATIONS = ("final_playbook", "reflector_reads_playbook", "curator_reads_attempt")


class AceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- adaptation (the teacher as generator, reflector and curator) -----------------
    # Reflect-and-replay rounds after a failed play (ace.py `max_num_rounds: 3`); 0:
    # one play, one reflection, the curator (the AppWorld harness's `solve_task_wo_gt`).
    max_rounds: int = Field(default=3, ge=0, le=10)
    # What the reflector is told of the outcome: the one feedback setting of AgentBrew
    # and every baseline (workers/memory/feedback.py; memory.retrieval.feedback sets it
    # for all). "binary": whether the task was solved (ace.py passes "Predicted answer
    # (does not) match(es) ground truth" even with `no_ground_truth`: the verdict, never
    # the answer); "category" / "message": a failure's category / the checker's message
    # too; "none": nothing (the AppWorld no-GT harness's reflector reads "[not
    # applicable]" for the test report).
    feedback: Literal["none", "binary", "category", "message"] = DEFAULT_FEEDBACK
    # The curator runs every N tasks, on the latest reflection (ace.py
    # `curator_frequency: 1`).
    curator_frequency: int = Field(default=1, ge=1, le=100)
    # The playbook's sections: "generic", ace.py `_initialize_empty_playbook` (its
    # math/finance runs); "appworld", the AppWorld harness's eight
    # (appworld_initial_playbook.txt, whose curator only accepts those).
    sections: Literal["generic", "appworld"] = "generic"
    # The reflector's and curator's prompts: "ours" (reworded from ace.py's, generic:
    # prompts.py) or "appworld", the AppWorld harness's own, verbatim
    # (appworld_prompts.py: appworld_react_reflector_no_gt_prompt.txt and
    # appworld_react_curator_prompt.txt, filled as adaptation_react.py fills them, the
    # conversation history appended; a curator ADD to an unknown section is skipped, as
    # the harness's playbook update skips it).
    prompts: Literal["ours", "appworld"] = "ours"
    # How a curator's answer is applied. "valid_adds" (ours): its valid ADD operations,
    # the invalid ones skipped (an answer with none is asked again once, naming the
    # problem). "as_harness": as ACE's AppWorld harness applies it
    # (adaptation_react.py `curator_call`): the whole answer discarded, never asked
    # again, when it is no JSON object, lacks a string `reasoning` or a list
    # `operations`, or holds any operation that is not an object with type exactly
    # "ADD", a section and a content; an ADD to a section outside the playbook's is
    # skipped alone. `ace_appworld` sets it (conf/method_catalog/ace.yaml).
    curator_answer: Literal["valid_adds", "as_harness"] = "valid_adds"
    # What the reflector reads of the playbook. "playbook": the playbook the play read,
    # any bullet of which it may tag (the AppWorld harness: `reflector_call` fills
    # `{{playbook}}` with `self.playbook`; its generator cites nothing). "cited_bullets"
    # (ace.py `_train_single_sample`): the generator names the bullets it used
    # (core/generator.py `bullet_ids`) and the reflector reads only those
    # (playbook_utils.py `extract_playbook_bullets`). Ours asks the ACE stage's plays
    # (the teacher as generator, never the student) to cite the ids they use as
    # `[id]` and reads them off the play's own messages; the reflector may tag only
    # them (a tag of another bullet is not applied).
    reflector_reads: Literal["playbook", "cited_bullets"] = "playbook"
    # Which playbook the student reads. "final": as adaptation left it (the AppWorld
    # harness: its evaluation reads the playbook file `curator_call` rewrites after
    # every task). "best_on_validation" (ace.py `_offline_train`): after every
    # `eval_steps`-th training task the teacher plays every validation task with the
    # playbook so far, and a playbook whose accuracy is strictly above the best so far
    # (from 0.0, the initial playbook until then: `best_playbook`) becomes the one the
    # student reads (`run`'s final test reads `self.best_playbook`). As there, the
    # tasks after the last multiple of `eval_steps` are never validated.
    playbook_selection: Literal["final", "best_on_validation"] = "final"
    # ace.py `_extract_config_params` `eval_steps: 100` (finance/run.py `--eval_steps`).
    eval_steps: int = Field(default=100, ge=1)
    # The validation tasks, held out of the memory split (ace.py reads a split of its
    # own, finance/data/sample_config.json `val_data`; our protocol has none): this
    # fraction of the split's tasks, a fixed draw (the smallest sha256 of their ids),
    # which ACE then does not learn from. A third: FiNER's 500 validation samples beside
    # its 1,000 training samples (finer_val_batched_500_samples.jsonl).
    validation_fraction: float = Field(default=1 / 3, gt=0, lt=1)
    # Bullets the playbook starts with: a file in the original's format
    # (`## SECTION` lines, `[id] content` bullets), e.g. the AppWorld harness's
    # playbooks/appworld_initial_playbook.txt, or "appworld": that file as vendored
    # (appworld_prompts.INITIAL_PLAYBOOK); None: empty (ace.py's default). Its content
    # (not its path) is in the stage's identity.
    initial_playbook: str | None = None
    # Told to the curator as its budget (ace.py `playbook_token_budget: 80000`; not
    # enforced by the original either).
    playbook_token_budget: int = Field(default=80_000, ge=1_000)
    # Semantic de-duplication after each curation (bulletpoint_analyzer.py): None, off
    # (ace.py `use_bulletpoint_analyzer: False`); a cosine threshold, on (its default
    # 0.90): a new bullet that close to another is merged into it.
    dedup_threshold: float | None = Field(default=None, gt=0, le=1)
    # How a duplicate is merged: True, by the curator model into one bullet keeping the
    # first's id and the summed counts (the analyzer's `merge=True`); False, dropped.
    dedup_merge: bool = True
    # Ours (the original passes whole conversations; a cut keeps a runaway episode
    # from overflowing the reflector's window): a play's characters, an observation's.
    trajectory_chars: int = Field(default=12_000, ge=1_000, le=200_000)
    observation_chars: int = Field(default=2_000, ge=100, le=20_000)
    # -- what the student reads ------------------------------------------------------
    # What of the playbook a play reads, in characters; None: whole. The original gives
    # the generator the whole playbook (ACE's own AppWorld playbook reaches ~118 k
    # characters). Ours, 30,000: under distillery's generic injection cap
    # (`memory.bounds.max_injected_chars`, 32,000, which would cut it from the head and
    # drop whole later sections) and within a 40 k-token student's context; bounded
    # section-aware (bullets taken in turn from every section), each bullet left out
    # counted (`bullets_cut`, episodes with a cut: `playbook_cut`). For the whole
    # playbook raise both: method_catalog.<entry>.retrieval.playbook_max_chars=null and
    # memory.bounds.max_injected_chars=<more than the playbook>.
    playbook_max_chars: int | None = Field(default=30_000, ge=1_000)
    # The counts in each bullet line, `[id] helpful=X harmful=Y :: content` (ace.py's
    # format); False: `[id] content` (the AppWorld harness strips them).
    show_counts: bool = True
    # Our framing line before the playbook (the wording of ACE's generator prompt);
    # False where the benchmark's own prompt frames it: ACE's AppWorld generator prompt
    # as the benchmark's prompt file puts the playbook in its `{{ playbook }}` slot.
    frame: bool = True

    def build_identity(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", include=set(BUILD_FIELDS))
        if self.prompts != "ours":  # set only: the playbooks of old keep their keys
            out["prompts"] = self.prompts
        return omit_first_version_defaults(out)


# Settings added later, left out of identities at the first version's value (the
# playbooks and evaluations of old keep their keys); set otherwise, the keys move.
FIRST_VERSION = {"curator_answer": "valid_adds", "reflector_reads": "playbook"}
# Read only when the playbook is selected on validation.
SELECTION_ONLY = ("eval_steps", "validation_fraction")


def omit_first_version_defaults(identity: dict[str, Any]) -> dict[str, Any]:
    """`identity` (settings dumped) less the later settings at their first value."""
    out = {k: v for k, v in identity.items() if FIRST_VERSION.get(k, object()) != v}
    if out.get("playbook_selection") == "final":
        for name in ("playbook_selection", *SELECTION_ONLY):
            out.pop(name, None)
    return out


def ace_py_deviations(settings: AceSettings) -> tuple[str, ...]:
    """The deviations from ace.py in effect under `settings` (`ACE_PY_DEVIATIONS`)."""
    off = {
        "final_playbook": settings.playbook_selection != "final",
        "reflector_reads_playbook": settings.reflector_reads != "playbook",
    }
    return tuple(name for name in ACE_PY_DEVIATIONS if not off.get(name, False))


class AdaptationPlaySettings(AceSettings):
    """What the ACE stage's own plays (the teacher as generator) read: the read
    settings, and whether they are asked to name the bullets they use
    (`reflector_reads: cited_bullets`). Never a student's: evaluate stages read the
    method's `AceSettings`, and the request is in none of their texts."""

    cite_bullets: bool = False

    @classmethod
    def of(cls, settings: AceSettings) -> AdaptationPlaySettings:
        return cls(
            **settings.model_dump(), cite_bullets=settings.reflector_reads == "cited_bullets"
        )

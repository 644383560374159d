"""The request view of a benchmark that trims its conversation to the model's context
(AppWorld's): the authors' one-pair-at-a-time trimming, found by bisection; the budget
from the policy; a policy or server that cannot count sends everything, noted."""

from __future__ import annotations

import asyncio
import random

from distillery.workers.agents.context import UNCOUNTED, request_view
from distillery.workers.envs.appworld.react import trim_to_budget
from distillery.workers.envs.conventions import AgentConventions, ContextTrim


def _messages(opening: int, pairs: int, rng: random.Random) -> list[dict]:
    head = [{"role": "user", "content": "o" * rng.randint(1, 50)} for _ in range(opening)]
    steps = []
    for i in range(pairs):
        steps += [
            {"role": "assistant", "content": f"reply {i} " + "a" * rng.randint(0, 40)},
            {"role": "user", "content": f"output {i} " + "b" * rng.randint(0, 400)},
        ]
    return head + steps


def _size(messages: list[dict]) -> int:
    return sum(len(m["content"]) for m in messages)


def _one_pair_at_a_time(messages: list[dict], opening: int, budget: int) -> list[dict]:
    """The authors' loop: drop the oldest reply and output after the task message while
    the conversation is over budget and steps remain."""
    pre, post = messages[: opening - 1], messages[opening - 1 :]
    while len(post) > 1 and _size(pre + post) > budget:
        post = [post[0], *post[3:]]
    return pre + post


def test_bisection_drops_exactly_what_the_authors_loop_drops():
    rng = random.Random(7)
    for _ in range(300):
        opening, pairs = rng.randint(1, 4), rng.randint(0, 25)
        messages = _messages(opening, pairs, rng)
        budget = rng.randint(0, _size(messages) + 50)

        async def fits(view, budget=budget):
            return _size(view) <= budget

        view, dropped = asyncio.run(trim_to_budget(messages, opening, fits))
        assert view == _one_pair_at_a_time(messages, opening, budget)
        assert len(view) == len(messages) - 2 * dropped


class _Counting:
    def __init__(self, limit: int | None, counts: bool = True) -> None:
        self.prompt_token_limit = limit
        self.counts = counts
        self.asked = 0

    async def count_tokens(self, messages):
        self.asked += 1
        return _size(messages) if self.counts else None


CONVENTIONS = AgentConventions(context_trim=ContextTrim(buffer_tokens=10, trim=trim_to_budget))


def test_the_budget_is_the_policys_limit_less_the_benchmarks_buffer():
    messages = _messages(2, 6, random.Random(1))
    notes: list[str] = []
    policy = _Counting(limit=_size(messages[:2]) + 10 + 200)
    view = asyncio.run(request_view(messages, 2, CONVENTIONS, policy, notes))
    assert view == _one_pair_at_a_time(messages, 2, _size(messages[:2]) + 200)
    assert len(view) < len(messages) and notes and notes[0].startswith("context: request 7")
    # Enough room: everything, no note, one count.
    roomy = _Counting(limit=10**6)
    assert asyncio.run(request_view(messages, 2, CONVENTIONS, roomy, [])) is messages
    assert roomy.asked == 1


def test_without_a_limit_a_count_or_trimming_everything_is_sent():
    messages = _messages(1, 3, random.Random(2))
    plain = AgentConventions()
    assert asyncio.run(request_view(messages, 1, plain, _Counting(5), [])) is messages
    assert asyncio.run(request_view(messages, 1, CONVENTIONS, _Counting(None), [])) is messages
    notes: list[str] = []
    blind = _Counting(5, counts=False)  # a server without a tokenizer endpoint
    assert asyncio.run(request_view(messages, 1, CONVENTIONS, blind, notes)) is messages
    asyncio.run(request_view(messages, 1, CONVENTIONS, blind, notes))
    assert notes == [UNCOUNTED]  # said once per episode

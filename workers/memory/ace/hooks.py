"""What a play reads of ACE's memory: the whole playbook (every bullet of the bank, in
its sections: ACE gives the generator the full playbook, no retrieval), bounded
section-aware at `playbook_max_chars` (bullets left out counted: `bullets_cut`,
`playbook_cut`), between the
generator prompt's markers, before the first turn; during adaptation, a re-play also
reads the reflection on its task's previous play (ACE's generator `reflection` input).
No bullet at all: nothing is shown (the vanilla student), counted `empty_playbook`.
The ACE stage's own plays with `reflector_reads: cited_bullets` (`AdaptationPlaySettings`)
are also asked, after the playbook, to name the bullets they use (ace.py's generator
`bullet_ids`); a student never is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distillery.workers.memory.ace import prompts
from distillery.workers.memory.ace.playbook import SectionSet, bounded
from distillery.workers.memory.ace.records import BULLETS, Bullet
from distillery.workers.memory.ace.settings import AceSettings, AdaptationPlaySettings
from distillery.workers.memory.audit import allowed_hits
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.proactive import ProactiveOnly
from distillery.workers.memory.reflexion.records import Reflection

EVERY = 1_000_000  # the whole playbook


def _empty_log() -> dict[str, Any]:
    return {
        "bullets_shown": 0,
        "bullet_ids": [],
        "playbook_chars": 0,
        "playbook_cut": 0,
        "bullets_cut": 0,
        "empty_playbook": 0,
        "reflections_shown": 0,
        "isolation_checked": 0,
        "isolation_violations": 0,
    }


def playbook_block(playbook: str, frame: bool, cite: bool = False) -> str:
    # `cite`: the ACE stage's generator, asked to name the bullets it uses.
    request = [prompts.CITE_BULLETS] if cite else []
    if not frame:  # the benchmark's prompt frames it (ACE's own generator prompt)
        return "\n\n".join([playbook, *request])
    return "\n".join([prompts.FRAME, prompts.BEGIN, playbook, prompts.END, *request])


@dataclass
class AceHooks(ProactiveOnly):
    task_id: str
    search: Any  # memory_service.BankSearch
    settings: AceSettings
    allows: Callable[[MemorySource], bool]
    log: dict[str, Any] = field(default_factory=_empty_log)
    _block: str = ""

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0:
            bullets = await self._bullets(user_text)
            blocks = []
            if bullets:
                sections = SectionSet.of(self.settings.sections)
                playbook, cut = bounded(
                    bullets, sections, self.settings.show_counts, self.settings.playbook_max_chars
                )
                cite = isinstance(self.settings, AdaptationPlaySettings) and (
                    self.settings.cite_bullets
                )
                blocks.append(playbook_block(playbook, self.settings.frame, cite))
                self.log["playbook_chars"] = len(playbook)
                self.log["playbook_cut"] = int(cut > 0)
                self.log["bullets_cut"] = cut
            else:
                self.log["empty_playbook"] = 1
            own = [
                e
                for e in self.search.staged
                if isinstance(e, Reflection) and e.source.task_id == self.task_id
            ]
            if own:  # ACE's generator reads the latest reflection on its task
                blocks.append(f"{prompts.REFLECTION_HEADER}\n{own[-1].text}")
            self.log["reflections_shown"] = min(len(own), 1)
            self._block = "\n\n".join(blocks)
        return f"{self._block}\n\n{system_prompt}" if self._block else system_prompt

    async def _bullets(self, user_text: str) -> list[Bullet]:
        if not self.search.has_bank:
            return []
        (hits,) = await self.search.search(BULLETS, [user_text], self.task_id, EVERY, None)
        scratch: dict[str, Any] = {"retrievals": [], "isolation_checked": 0,
                                   "isolation_violations": 0}  # fmt: skip
        kept = [h.entry for h in allowed_hits(hits, self.allows, scratch)]
        # The audit's counts; the bullets by id (a playbook's per-hit lines would be long).
        self.log["isolation_checked"] = scratch["isolation_checked"]
        self.log["isolation_violations"] = scratch["isolation_violations"]
        self.log["bullets_shown"] = len(kept)
        self.log["bullet_ids"] = sorted(b.memory_id for b in kept)
        return kept

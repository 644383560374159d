"""ACE's playbook as the student reads it: whole when it fits; beyond
`playbook_max_chars` bounded section-aware (every section keeps bullets, not the head
of the playbook only), the bullets left out counted."""

from __future__ import annotations

from distillery.workers.memory.ace.playbook import SectionSet, bounded, render
from distillery.workers.memory.ace.records import Bullet
from distillery.workers.memory.ace.settings import AceSettings
from distillery.workers.memory.entries import MemorySource

SOURCE = MemorySource("t0", None, "memory", "teacher", "e0")


def _playbook(sections: SectionSet, per_section: int) -> list[Bullet]:
    return [
        Bullet(f"{key[:4]}-{i:05d}", SOURCE, key, f"rule {i} of {key} " + "x" * 80, order=n)
        for n, (key, i) in enumerate((k, i) for k in sections.keys for i in range(per_section))
    ]


def test_a_playbook_that_fits_is_whole():
    sections = SectionSet.of("appworld")
    bullets = _playbook(sections, 3)
    text, cut = bounded(bullets, sections, True, 30_000)
    assert cut == 0 and text == render(bullets, sections, True)
    assert bounded(bullets, sections, True, None) == (text, 0)


def test_a_long_playbook_keeps_every_section_and_counts_the_cut():
    sections = SectionSet.of("appworld")
    bullets = _playbook(sections, 200)  # far beyond the bound
    whole = render(bullets, sections, True)
    text, cut = bounded(bullets, sections, True, 30_000)
    assert len(whole) > 100_000 and len(text) <= 30_000
    kept = [b for b in bullets if b.memory_id in text]
    assert cut == len(bullets) - len(kept) > 0
    # A cut from the head would keep only the first sections; this keeps them all, each
    # with its earliest bullets.
    for key in sections.keys:
        mine = [b.memory_id for b in bullets if b.section == key]
        assert mine[0] in text
        shown = [m for m in mine if m in text]
        assert shown == mine[: len(shown)]
    assert AceSettings().playbook_max_chars == 30_000

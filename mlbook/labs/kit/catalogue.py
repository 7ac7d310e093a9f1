"""Writing a catalogue: mutants of one answer cell, as rows.

A mutant changes one answer cell and must lose points on the test cells that check it: most
often that cell's visible test and its hidden partner (``<test>_hidden``). ``mutants_of`` builds
the mutants of one answer cell from rows of (name, misconception, the edit of the reference
answer, what the failure messages must match), so a catalogue states each mistake once, as the
line that differs, and never the ``Mutant(...)`` around it. A ``Mutant(...)`` written out is
left for a mistake that spans two answer cells.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from mlbook.authoring.catalogue import CellCode, Mutant

__all__ = ["mutants_of"]


def mutants_of(cell: str, test: str | tuple[str, ...], rows: Sequence[tuple[str, str, CellCode, str]], *,
               also: Sequence[str] = (), demo: Iterable[str] = ()) -> list[Mutant]:
    """Mutants of the answer cell ``cell`` that the test cells ``test`` names (and those in ``also``) must fail.

    Args:
        cell: the answer cell's grade id.
        test: its visible test cell's grade id, whose hidden partner ``<test>_hidden`` must fail
            too; or the exact tuple of test cells, for mutants that only some cells can catch
            (a mistake only the hidden check's fresh inputs reveal, a memory measurement).
        rows: (name, misconception, edit, message): ``edit`` is a ``patch(old, new)`` of the
            reference answer (or a tuple of them), ``message`` the regular expression every
            failing cell's message must match.
        also: more test cells that every one of these mutants must fail (a later cell that uses
            this answer).
        demo: names of the rows that join the demo class.
    Raises:
        ValueError: a name in ``demo`` is not one of the rows.
    """
    demo = set(demo)
    unknown = demo - {row[0] for row in rows}
    if unknown:
        raise ValueError(f"mutants_of({cell!r}): demo names {sorted(unknown)} are not among the rows")
    must_fail = (*((test, f"{test}_hidden") if isinstance(test, str) else test), *also)
    return [Mutant(name=name, misconception=idea, cells={cell: edit}, must_fail=must_fail, message=message,
                   demo=name in demo)
            for name, idea, edit, message in rows]

"""mlbook: the instructor and TA tooling for the attention labs.

The pipeline, one module per step:

    notebooks/<lab>.py --authoring--> source/<lab>/<lab>.ipynb --build (nbgrader generate_assignment)-->
    release/<lab>/<lab>.ipynb --students--> submitted/ --autograde (nbgrader)--> autograded/ + gradebook
    --results--> export (CSV), feedback (HTML), the terminal table

Per-lab grading material (hidden checks, the misconception catalogue) lives in
``mlbook.labs.<lab>``; students never receive this package.
"""

import sys

# jsonschema (imported by nbformat) builds an IRI grammar with lark when rfc3987_syntax is
# installed: 2.7 s per process start, for "iri" format checks no notebook schema uses.
# Marking the module absent skips those two checks and nothing else.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]

__version__ = "0.1.0"

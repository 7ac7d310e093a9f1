"""mlbook: the instructor and TA tooling for the attention labs.

The pipeline, one module per step:

    notebooks/<lab>.py --authoring--> source/<lab>/<lab>.ipynb --build (nbgrader generate_assignment)-->
    release/<lab>/<lab>.ipynb --students--> submitted/ --autograde (nbgrader)--> autograded/ + gradebook
    --results--> export (CSV), feedback (HTML), the terminal table

Per-lab grading material (hidden checks, the misconception catalogue) lives in
``mlbook.labs.<lab>``; students never receive this package.
"""

__version__ = "0.1.0"

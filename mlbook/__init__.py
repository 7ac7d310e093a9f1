"""mlbook: the instructor and TA tooling for the attention labs (the ``mlbook`` command).

The pipeline, one package per stage:

    notebooks/<lab>.py --authoring--> source/ and release/ --students (via an LMS: lms)--> submitted/
        --grading (intake, prepare; each notebook run by sandbox, decided by judge)--> autograded/ + gradebook
        --outputs--> feedback pages, CSV exports, the class report, the terminal table

Packages, from the ground floor up: each imports only the packages listed before it, but for
two imports that say why where they stand (``scripts/import_graph.py`` measures it,
``tests/test_import_graph.py`` holds it):
- ground         ``course`` (where everything lives), ``nbgrader_env`` (nbgrader set up for mlbook,
                 by an explicit ``install()``, never changing the working directory), ``files``
                 (atomic writes), ``errors``, ``pyast``; the kernel side ``mlbook_kernel`` and the
                 students' ``mlbook_helpers``;
- ``calendar``   the course calendar: release and due dates (``course.toml``), extensions, the
                 late penalty, handed to every stage above as values;
- ``authoring``  authored notebook -> nbgrader's source and release, the release zip, the
                 misconception catalogue's vocabulary, submissions made as students would;
- ``labs``       per-lab grading material and the kit every lab is written with; each lab's
                 catalogue (``load_catalogue``);
- ``judge``      trusted verdicts: what to re-run per test cell (plan), the judge that admits
                 the kernel's sessions and runs the checks (server), calls into the kernel
                 (remote), the verdicts written into the notebook nbgrader scores;
- ``sandbox``    isolation: the limits, the bubblewrap sandbox, memory measured from outside,
                 warm kernels, one notebook run in a sandbox and judged;
- ``grading``    a class end to end: submission folders taken in, sanitized, scheduled over
                 sandboxes (local threads or Dask), recorded in nbgrader's gradebook, each
                 attempt's status; resumable;
- ``lms``        hand-in and hand-back through an LMS: the roster, bulk downloads collected into
                 ``submitted/``, the hand-back zip;
- ``outputs``    what people read: scores and messages (results), feedback, exports, the report;
- tools          ``student`` (``mlbook validate``: a student's check before handing in, in their
                 own kernel), ``mutation`` (``mlbook mutate``), ``similarity``, ``lint``
                 (``mlbook check``), ``hub`` (the course on a JupyterHub: nbgrader's exchange
                 hardened, the hub and its profiles, ``mlbook hub``);
- top            ``demo`` (the main job: build, grade a demo class, print) and ``cli`` (one thin
                 function per subcommand).

The kernel side (what runs inside the sandbox, beside the student's code) is the separate
package ``mlbook_kernel``; students never receive ``mlbook`` (on a hub their environment holds
only its exchange module, ``mlbook.hub.exchange``, which their server submits through).
"""

import sys

# jsonschema (imported by nbformat) builds an IRI grammar with lark when rfc3987_syntax is
# installed: 2.7 s per process start, for "iri" format checks no notebook schema uses.
# Marking the module absent skips those two checks and nothing else.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]

# CPython 3.11 races when two threads build syntax trees (numpy's np.load does, in the judge's
# threads): every ast.parse in an mlbook process takes one lock (mlbook/pyast.py says why).
from mlbook import pyast as _pyast  # noqa: E402

_pyast.install()

__version__ = "0.1.0"

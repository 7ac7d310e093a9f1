"""nbgrader configuration for the attention labs (read by nbgrader and by `mlbook`).

Every setting here answers a measured nbgrader 0.9.6 behaviour (see README, "Grading").
"""

from mlbook.calendar.late import SchedulePenalty
from mlbook.outputs import inert_html
from mlbook.outputs.feedback_page import FeedbackExporter
from mlbook.outputs.preprocessors import WARNING_STDERR_PATTERN, RedactTestTracebacks
from nbgrader.preprocessors import ClearHiddenTests, GetGrades
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

from mlbook_kernel.polling import KERNEL_ARGS

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

c.CourseDirectory.course_id = "attention-labs"

# Per-cell time limit. An interruptible runaway loop is interrupted and the rest of the
# notebook still runs; the slowest reference cell (lab 5's training) needs well under this.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
# The project's kernel arguments (nbgrader's default for python kernels, plus a quiet kernel log).
# Outputs are collected before the kernel stops: a graceful shutdown only costs 1-2 s a notebook.
c.Execute.shutdown_kernel = "immediate"
c.Execute.extra_arguments = KERNEL_ARGS
# About one widget cell in 120 otherwise waits the whole timeout for a reply that has arrived
# (a lost ZeroMQ wake-up, benchmarks/reply_stall.py): the kernel's client polls in 0.25 s slices.
c.AsyncKernelManager.client_class = "mlbook_kernel.polling.SlicedKernelClient"  # nbgrader fixes Execute's manager class

# A student who deletes a test cell does not escape it: nbgrader puts it back.
c.OverwriteCells.add_missing_cells = True

# nbgrader zeroes a test cell with any stderr output; library warnings (torch's among them)
# must not cost a correct answer its points. Only whole stderr chunks that are warnings go.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = WARNING_STDERR_PATTERN

# Feedback: no hidden test text (ClearHiddenTests) and no traceback quoting it
# (RedactTestTracebacks keeps only the misconception message).
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, RedactTestTracebacks, CSSHTMLHeaderPreprocessor]
# nbgrader's feedback page, with each contents entry named by its grade_id (a failing test's with its
# message) and output text that wraps (mlbook/outputs/feedback_page.py).
c.GenerateFeedback.exporter_class = FeedbackExporter

# The formgrader's grading pages and the feedback pages show a student's notebook as HTML: none
# of the student's HTML runs there (nbgrader's templates render markdown cells unsanitized).
inert_html.configure(c)

# Late work: nbgrader's own late-submission step (AssignLatePenalties, counting from the
# gradebook's due date plus the student's extension, both written from course.toml and
# extensions.toml) with the course's policy from course.toml.
c.AssignLatePenalties.plugin_class = SchedulePenalty

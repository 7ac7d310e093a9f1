"""What TAs, instructors and students read once a class is graded.

- ``results``        scores from the gradebook, status from the grading attempts, messages from
                     the autograded notebooks: one ``SubmissionResult`` per student and lab;
- ``feedback``       ``mlbook feedback``: each student's HTML page (nbgrader's, hidden tests cleared);
- ``preprocessors``  nbgrader preprocessors mlbook adds (test tracebacks reduced to the message);
- ``inert_html``     the rules every HTML page made from a student's notebook is rendered with
                     (feedback, the formgrader's grading page): none of the student's HTML runs;
- ``export``         ``mlbook export``: grades.csv, nbgrader's CSV, Canvas's gradebook CSV;
- ``report``         ``mlbook report``: the class report, one offline HTML page;
- ``table``          the plain-text tables the command line prints.
"""

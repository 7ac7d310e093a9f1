"""Hand-in and hand-back through an LMS: the roster, bulk downloads in, feedback out.

The week of a TA, one module per step:

    course.toml (schedule) --roster--> nbgrader's students --collect (bulk download zip)-->
        submitted/<student>/<lab>/<lab>.ipynb + timestamp.txt --autograde--> gradebook
        --late (penalties)--> grades, reports, feedback --handback--> the LMS's feedback zip

The schedule, the extensions and the late penalty are the course calendar (``mlbook.calendar``),
below grading, which needs them first.

Modules:
- ``late``           the old home of ``SchedulePenalty``, which course configurations written
                     before the calendar moved still name (``mlbook.calendar.late``);
- ``roster``         ``mlbook roster import``: Canvas, Moodle and plain CSV class lists into
                     nbgrader's student table, LMS user ids kept;
- ``zipread``        a hostile zip read safely: structure checked, sizes counted on the bytes
                     actually decompressed, nothing extracted by its own name;
- ``formats``        one module per LMS (Canvas, Moodle, a pattern for any other, a plain class
                     list) and the registry every step below reads: how its downloads name
                     files, how its class list reads, how its feedback upload names a page;
- ``records``        what those files say: a download's entry, a class list's row;
- ``collect``        ``mlbook collect``: a bulk download placed in nbgrader's layout, the latest
                     attempt before the cutoff, unmatched files and missing students reported;
- ``handback``       the zip each LMS's bulk feedback upload takes, keyed by the download's names;
- ``downloads``      bulk downloads written as Canvas and Moodle write them (the demo, the tests).
"""

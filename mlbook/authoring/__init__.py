"""Authoring: from the instructor's file to what students receive.

- ``notebooks``    read and write notebooks; the one parser of nbgrader's solution and
                   hidden-test delimiters; authored (jupytext) -> source notebook;
- ``build``        ``mlbook build``: source and release (nbgrader generate_assignment), with a
                   manifest of content hashes;
- ``lint``         ``mlbook check``: every rule a lab must satisfy (docs/authoring.md lists them);
- ``release_zip``  ``mlbook release``: the zip to post on an LMS, exactly what a student needs;
- ``catalogue``    each lab's misconception mutants and alternative correct solutions;
- ``submissions``  notebooks filled in as students would (the demo class, the harness).
"""

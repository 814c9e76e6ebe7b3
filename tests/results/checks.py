"""The results/ tests' way of checking: each test script collects its failed checks and reports
them all at the end, so one run shows every broken case, not only the first.

    from checks import check, finish   # tests/results/ is the script's own folder, on sys.path
    check(top1 == 93.2, "top-1 read from the record: %r" % top1)
    ...
    finish()   # prints each failure and exits 1, or prints "<script>: all passed"
"""
import os
import sys

fails = []


def check(ok, what):
    """Records `what` as a failure unless `ok`."""
    if not ok:
        fails.append(what)


def finish():
    """Ends the test script: exit status 1 with every failure printed, else 0."""
    name = os.path.basename(sys.argv[0])
    if fails:
        print("%s: %d failed:\n  %s" % (name, len(fails), "\n  ".join(fails)))
        sys.exit(1)
    print("%s: all passed" % name)

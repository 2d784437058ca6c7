#!/usr/bin/python3
"""scripts/tpusim_io.py keeps tpusim's promises for outputs (docs/robustness.md, "Outputs"):
`-` and descriptors written in place, FIFOs written through, symlinks followed, permissions
kept, an input never overwritten, no temporary left. Exit status 0 when every check holds."""
import argparse
import os
import stat
import subprocess
import sys
import tempfile
import threading


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--scripts", required=True)
    a = p.parse_args()
    sys.path.insert(0, a.scripts)
    import tpusim_io

    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        # A symlink is written through, and stays a link.
        os.makedirs(os.path.join(d, "reports"))
        target = os.path.join(d, "reports", "page.html")
        with open(target, "w") as f:
            f.write("old")
        os.symlink("reports/page.html", os.path.join(d, "latest.html"))
        tpusim_io.write_output(os.path.join(d, "latest.html"), "new")
        check(os.path.islink(os.path.join(d, "latest.html")), "the symlink was replaced")
        check(open(target).read() == "new", "the link's target was not written")

        # An existing file keeps its permissions.
        private = os.path.join(d, "private.html")
        with open(private, "w") as f:
            f.write("old")
        os.chmod(private, 0o600)
        tpusim_io.write_output(private, b"new")
        check(stat.S_IMODE(os.stat(private).st_mode) == 0o600, "the mode changed")

        # A FIFO is written through, not replaced.
        fifo = os.path.join(d, "pipe")
        os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        tpusim_io.write_output(fifo, "through the pipe")
        reader.join()
        check(got == [b"through the pipe"], f"the FIFO reader got {got!r}")
        check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced")

        # `-` and /dev/stdout: the descriptor itself (here a file opened for appending).
        log = os.path.join(d, "log")
        with open(log, "w") as f:
            f.write("before\n")
        ino = os.stat(log).st_ino
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import tpusim_io; "
                "tpusim_io.write_output('-', 'one\\n'); tpusim_io.write_output('/dev/stdout', 'two\\n')")
        with open(log, "a") as out:
            subprocess.run([sys.executable, "-c", code, a.scripts], stdout=out, check=True)
        check(os.stat(log).st_ino == ino, "the log behind stdout was replaced")
        check(open(log).read() == "before\none\ntwo\n", f"the log holds {open(log).read()!r}")

        # An output that is an input is refused.
        try:
            tpusim_io.check_not_input(os.path.join(d, "latest.html"), [target])
            failures.append("an output naming an input (through a symlink) was accepted")
        except ValueError as e:
            check("would overwrite the input" in str(e), f"message: {e}")

        left = [n for n in os.listdir(d) + os.listdir(os.path.join(d, "reports"))
                if n.endswith(".tpusim-tmp")]
        check(not left, f"temporaries left: {left}")

    for f in failures:
        sys.stderr.write(f"tpusim_io_test: {f}\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

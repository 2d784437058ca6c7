#!/usr/bin/python3
"""System test: `tpusim sweep --executor slurm` on a real one-node Slurm cluster on localhost.

Installs Debian's slurm-wlm and munge when they are missing (as root), starts munged, slurmctld
and slurmd with a minimal configuration in a temporary directory (nothing under /etc is used or
changed), runs a small sweep through a job array, runs the same sweep with the local runner, and
checks that the tables and the point reports are byte-identical. The daemons are stopped even
when the test fails. Exit status 77 (skipped) when not root: the daemons need it.

Usage: slurm_test.py --tpusim build/tpusim --spec tb/system/sweep/data/small.json"""
import argparse
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

DAEMONS = {"munged": "munge", "slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "sbatch": "slurm-wlm"}
PATHS = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]


def which(name):
    return shutil.which(name, path=os.pathsep.join(PATHS + os.environ.get("PATH", "").split(os.pathsep)))


def install_missing():
    missing = sorted({pkg for tool, pkg in DAEMONS.items() if which(tool) is None})
    if not missing:
        return
    print(f"slurm_test: installing {' '.join(missing)}", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing,
                   check=True, env=env)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def slurm_conf(t):
    return f"""# A one-node Slurm cluster on localhost for tb/system/sweep/slurm_test.py.
ClusterName=tpusimtest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={t}/munge/munge.socket
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool
SlurmctldPidFile={t}/slurmctld.pid
SlurmdPidFile={t}/slurmd.pid
SlurmctldLogFile={t}/slurmctld.log
SlurmdLogFile={t}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=localhost CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    def __init__(self, t):
        self.t = t
        self.procs = []
        self.env = dict(os.environ, SLURM_CONF=f"{t}/slurm.conf")

    def start(self):
        t = self.t
        for d in ("munge", "state", "spool"):
            os.makedirs(f"{t}/{d}", mode=0o755 if d == "munge" else 0o700, exist_ok=True)
        with open(f"{t}/munge/munge.key", "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(f"{t}/munge/munge.key", 0o600)
        write(f"{t}/slurm.conf", slurm_conf(t))
        self.spawn("munged", [which("munged"), "--foreground", "--force",
                              f"--key-file={t}/munge/munge.key", f"--socket={t}/munge/munge.socket",
                              f"--pid-file={t}/munge/munged.pid", f"--log-file={t}/munge/munged.log",
                              f"--seed-file={t}/munge/munged.seed"])
        self.wait_for(lambda: os.path.exists(f"{t}/munge/munge.socket"), "munged's socket")
        self.spawn("slurmctld", [which("slurmctld"), "-D", "-i", "-f", f"{t}/slurm.conf"])
        self.spawn("slurmd", [which("slurmd"), "-D", "-N", "localhost", "-f", f"{t}/slurm.conf"])

        def idle():
            r = subprocess.run([which("sinfo"), "-h", "-o", "%T"], env=self.env, capture_output=True,
                               text=True)
            return r.returncode == 0 and r.stdout.strip() in ("idle", "mixed", "allocated")

        self.wait_for(idle, "the node to be idle")

    def spawn(self, name, argv):
        log = open(f"{self.t}/{name}.stdout", "w")
        self.procs.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                  env=self.env)))

    def wait_for(self, ready, what, timeout=90):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with status {p.returncode}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {timeout} s waiting for {what}")

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def logs(self):
        out = []
        for f in sorted(glob.glob(f"{self.t}/*.log") + glob.glob(f"{self.t}/*.stdout") +
                        glob.glob(f"{self.t}/munge/*.log")):
            with open(f, errors="replace") as fh:
                out.append(f"--- {f} (last lines)\n" + "".join(fh.readlines()[-15:]))
        return "\n".join(out)


def outputs(d):
    """results.csv, results.json and each point's report, by path relative to the sweep."""
    files = {}
    for f in ["results.csv", "results.json"] + sorted(glob.glob(f"{d}/points/*/*.json")):
        rel = os.path.relpath(f, d) if os.path.isabs(f) else f
        if rel.endswith((".host.json", ".failed.json")):
            continue
        with open(os.path.join(d, rel), "rb") as fh:
            files[rel] = fh.read()
    return files


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tpusim", required=True)
    p.add_argument("--spec", required=True)
    a = p.parse_args()
    if os.geteuid() != 0:
        print("slurm_test: SKIPPED: slurmctld and slurmd need root here")
        return 77
    install_missing()
    t = tempfile.mkdtemp(prefix="tpusim-slurm-")
    os.chmod(t, 0o755)
    cluster = Cluster(t)
    ok = False
    try:
        cluster.start()
        # Three runs per job array: the eight runs go in three arrays, the second and third
        # with their offsets (Slurm's MaxArraySize, docs/sweeps.md).
        slurm = subprocess.run([a.tpusim, "sweep", a.spec, "--executor", "slurm", "--max-array-size", "3",
                                "--out", f"{t}/slurm-out"],
                               env=cluster.env, capture_output=True, text=True, timeout=900)
        print(slurm.stdout + slurm.stderr)
        if slurm.returncode != 0:
            raise RuntimeError(f"the Slurm sweep exited with status {slurm.returncode}")
        local = subprocess.run([a.tpusim, "sweep", a.spec, "-j", "2", "--out", f"{t}/local-out"],
                               capture_output=True, text=True, timeout=900)
        if local.returncode != 0:
            raise RuntimeError(f"the local sweep exited with status {local.returncode}: {local.stderr}")
        got, want = outputs(f"{t}/slurm-out"), outputs(f"{t}/local-out")
        if sorted(got) != sorted(want):
            raise RuntimeError(f"different files: slurm {sorted(got)} vs local {sorted(want)}")
        differ = [f for f in want if got[f] != want[f]]
        if differ:
            raise RuntimeError(f"differ from the local runner's: {differ}")
        tasks = glob.glob(f"{t}/slurm-out/slurm/task-*.out") + glob.glob(f"{t}/slurm-out/slurm/array-*-task-*.out")
        scripts = glob.glob(f"{t}/slurm-out/slurm/*.sbatch")
        if len(scripts) != 3:
            raise RuntimeError(f"expected three job arrays of at most 3 runs, found {sorted(scripts)}")
        if len(tasks) != len([f for f in want if f.startswith("points/") and not f.endswith("/chip.json")]):
            raise RuntimeError(f"expected one Slurm task per run, found {len(tasks)} task logs")
        print(f"slurm_test: {len(want)} files identical to the local runner's; "
              f"{len(tasks)} array tasks ran")
        ok = True
    except Exception as e:  # noqa: BLE001 -- any failure is reported with the daemons' logs
        print(f"slurm_test: FAILED: {e}\n{cluster.logs()}")
    finally:
        cluster.stop()
        if ok:
            shutil.rmtree(t, ignore_errors=True)
        else:
            print(f"slurm_test: kept {t} for inspection")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

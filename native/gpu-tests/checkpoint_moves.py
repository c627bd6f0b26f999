"""The bare checkpoint API's round trip on a group of processes, shared by the probes of what the
driver does with memory shared between processes (checkpoint_ipc.py, checkpoint_vmm_share.py).
Every move goes through checkpoint_raw.py in a process of its own: the API refuses to checkpoint
the calling process, and the exporter is one of those moved."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ATTEMPTS = [("exporter alone", ["exporter"]), ("importer alone", ["importer"]),
            ("both", ["importer", "exporter"])]


def raw(pid, op):
    """The driver's answer, or TIMEOUT: a call that did not return within 20 s (killed)."""
    try:
        out = subprocess.run([sys.executable, os.path.join(HERE, "checkpoint_raw.py"), str(pid), op],
                             capture_output=True, text=True, check=False, timeout=20)
    except subprocess.TimeoutExpired:
        return "TIMEOUT"
    words = out.stdout.split()
    return words[-1] if words else (out.stderr.strip().splitlines() or ["no answer"])[-1][:200]


def attempts(variable):
    """ATTEMPTS, or those the environment variable names (comma separated)."""
    only = os.environ.get(variable)
    return [a for a in ATTEMPTS if only is None or a[0] in only.split(",")]


def round_trip(pids, who):
    """Lock + checkpoint each of `who`, then back to running whatever that left (restore + unlock,
    or unlock alone), in reverse; the driver's answers and the states before and after."""
    suspend = {w: raw(pids[w], "suspend") for w in who}
    states = {w: raw(pids[w], "state") for w in who}
    resume = {w: raw(pids[w], "resume" if states[w] == "CHECKPOINTED" else "unlock")
              for w in reversed(who) if states[w] in ("CHECKPOINTED", "LOCKED")}
    after = {w: raw(pids[w], "state") for w in who}
    return {"suspend": suspend, "suspendedStates": states, "resume": resume, "statesAfter": after}

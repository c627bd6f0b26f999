"""Checks of an isolated shard's MPS setup on a real GPU (docs/compute.md, "Isolated shards").

  python3 mps_checks.py LIBVGPU > table

Starts an MPS control daemon of its own and, with libvgpu.so loaded and a limits file as the agent
writes it, checks that:
  forced     - a process whose own environment asks for 100 % and a wrong pipe folder is the MPS
               client its limits file says (50 %): what CUDA reports inside it;
  no-daemon  - told to be an MPS client where no control daemon answers, PyTorch gets no GPU;
  read-only  - (root, mount namespaces) the pipe folder bind-mounted read-only at the fixed path,
               as the agent mounts it, still makes the process an MPS client, and cannot be written;
               then also with a /dev/shm and an IPC namespace of its own, as a container has.
Prints one JSON line per check; the daemon is told to quit at the end.
"""
import json, os, subprocess, sys, tempfile

import compute_bench as cb

PROBE = r'''
import ctypes, json, os, torch
torch.zeros(1, device="cuda")
cu = ctypes.CDLL("libcuda.so.1"); on = ctypes.c_int()
rc = cu.cuDeviceGetAttribute(ctypes.byref(on), 133, 0)  # CU_DEVICE_ATTRIBUTE_MPS_ENABLED
print(json.dumps({"mps_enabled": on.value if rc == 0 else f"error {rc}",
                  "sms": torch.cuda.get_device_properties(0).multi_processor_count,
                  "env_percent": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
                  "env_pipes": os.environ.get("CUDA_MPS_PIPE_DIRECTORY")}))
'''


def probe(env):
    r = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, **env}, text=True, capture_output=True)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    return {"rc": r.returncode, **(json.loads(lines[-1]) if lines else {}),
            **({} if r.returncode == 0 else {"stderr": r.stderr.strip().splitlines()[-3:]})}


def in_namespace(lib, work, pipes, private_shm, ipc, pid=False):
    """The probe in a mount namespace (and an IPC one) where only the shard's mounts differ."""
    env = cb.prod(lib, work, f"ns-{int(private_shm)}{int(ipc)}{int(pid)}", 30, 3, 30)
    del env["GPUSHARDS_MPS_PIPE_PATH"]
    # The fixed path exists only inside the namespace: a tmpfs over /run/gpushards there.
    script = (f"mount -t tmpfs none /run/gpushards && mkdir /run/gpushards/mps && "
              f"mount --bind -o ro {pipes} /run/gpushards/mps && "
              + ("mount -t tmpfs none /dev/shm && " if private_shm else "")
              + f"(touch /run/gpushards/mps/x 2>/dev/null && echo WRITABLE || echo read-only) && "
              f"{sys.executable} -c '{PROBE}'")
    r = subprocess.run(["unshare", "-m"] + (["-i"] if ipc else []) + (["-p", "-f", "--mount-proc"] if pid else [])
                       + ["sh", "-c", script],
                       env={**os.environ, **env}, text=True, capture_output=True)
    lines = r.stdout.splitlines()
    got = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return {"rc": r.returncode, "mount": lines[0] if lines else None, **got,
            **({} if r.returncode == 0 else {"stderr": r.stderr.strip().splitlines()[-2:]})}


def main():
    lib = os.path.abspath(sys.argv[1])
    cb.mps_start()
    work = tempfile.mkdtemp(prefix="gs-mps-checks-")
    try:
        print(json.dumps({"check": "plain client at 100 %", **probe(cb.mps(100))}), flush=True)
        env = cb.prod(lib, work, "forced", 50, 3, 50)
        print(json.dumps({"check": "forced", "want": 50, **probe(env)}), flush=True)
        env = {**cb.prod(lib, work, "nodaemon", 50, 3, 50), "GPUSHARDS_MPS_PIPE_PATH": work + "/no-daemon"}
        print(json.dumps({"check": "no-daemon", **probe(env)}), flush=True)
        pipes = cb.MPS["CUDA_MPS_PIPE_DIRECTORY"]
        created = not os.path.exists("/run/gpushards")
        os.makedirs("/run/gpushards", exist_ok=True)
        try:
            # As in a container: the pipe folder read-only at the fixed path, and then a /dev/shm of
            # its own (Docker gives each container one) and an IPC namespace of its own.
            for name, *how in (("read-only", False, False), ("read-only, own /dev/shm", True, False),
                               ("read-only, own /dev/shm and IPC namespace", True, True),
                               ("read-only, own /dev/shm, IPC and PID namespaces", True, True, True)):
                print(json.dumps({"check": name, "want": 30, **in_namespace(lib, work, pipes, *how)}), flush=True)
        finally:
            if created: os.rmdir("/run/gpushards")
    finally:
        cb.mps_stop()


if __name__ == "__main__":
    main()

"""Processes of one distributed run: free loopback ports for their addresses, and a group started together and
ended together (compare.py's workers, hosts_bench.py's ranks, tf_resnet.py's workers)."""
import os
import socket
import subprocess
import tempfile
import time


def free_ports(n):
    """n distinct loopback ports that are free now (held open together while they are chosen)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_together(commands, timeout, session=False):
    """Starts every (argv, env) at once and waits for all. When one exits non-zero, or the deadline passes, the
    others are killed (a peer left waiting on a dead rank would otherwise wait for its own timeout): with `session`
    each runs in a session of its own and its whole process group is killed. Returns (return codes, -9 for the
    killed; [(stdout, stderr)] per command; a note saying why the others were killed, or "")."""
    files = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in commands]
    procs = [subprocess.Popen(argv, env=env, stdout=o, stderr=e, text=True, start_new_session=session)
             for (argv, env), (o, e) in zip(commands, files)]
    deadline = time.monotonic() + timeout
    note = ""
    while True:
        states = [p.poll() for p in procs]  # every process polled each round (any() would stop at the first running)
        if all(code is not None for code in states):
            break
        failed = next((p for p, code in zip(procs, states) if code not in (None, 0)), None)
        if failed or time.monotonic() > deadline:
            note = f"a process exited {failed.returncode}; the others were killed" if failed \
                else f"not finished within {timeout} s"
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, 9) if session else p.kill()
                    except ProcessLookupError:
                        pass
            break
        time.sleep(0.05)
    codes = [p.wait() for p in procs]
    texts = []
    for o, e in files:
        o.seek(0)
        e.seek(0)
        texts.append((o.read(), e.read()))
        o.close()
        e.close()
    return codes, texts, note

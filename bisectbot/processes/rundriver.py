"""The run driver: the jail every run of the program under test starts in (issue 25).

One driver process per thread that runs programs (one per sandbox and thread for untrusted
code, inside bubblewrap), started once and fed one request per run, so a run costs no more than
a bare `Popen` (bubblewrap alone costs ~10 ms, a demo run 2 ms). The driver is the jail:

- it is a *child subreaper* (Linux `PR_SET_CHILD_SUBREAPER`): whatever a run starts — even a
  `setsid sleep 1000 &` that leaves its session — stays below the driver, and when the run's
  program exits, every process it left behind is killed and reaped before the answer is given;
- the deadline counts from the start of the run to the end of its output, whoever holds the
  pipe: at the deadline the whole tree is killed;
- stdout and stderr are read up to `cap` bytes each; past it the run is stopped at once and
  marked `output-too-large`, and nothing more is kept;
- when the thread that started it ends, or the bot stops it (SIGTERM), it kills its run's tree
  and exits (`PR_SET_PDEATHSIG`), so no run outlives the bot's wish.

Requests are one JSON line {"argv", "cwd", "env", "timeout", "cap"}. The answer is one JSON line
{"rc" (null: killed), "s", "stopped", "out": <bytes>, "err": <bytes>} followed by exactly that
many raw bytes of stdout, then of stderr: memory stays at twice the cap whatever the program
prints. The driver is untrusted code's neighbour in a sandbox: the bot checks its answers as
untrusted output (processes.procs).

The source is run as `python -I -S -c DRIVER` (a sandbox sees no bisectbot package), so it uses
the standard library only and never raises out of its loop.
"""

from __future__ import annotations

DRIVER = r"""
import fcntl, json, os, select, selectors, signal, subprocess, sys, time
BATCH = 0.005  # seconds a run's output is left to gather in its pipes between reads
try:
    import ctypes
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of a run become ours
    _libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: our starter gone, we go too
except Exception:
    pass
ME = os.getpid()
current = []  # the run's Popen while one runs

def children():
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read()
            if int(data.rsplit(b")", 1)[1].split()[1]) == ME:
                found.append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    return found

def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True  # no child left at all
        if pid == 0:
            return False  # some still run

def kill_tree(p):
    # the run's group first (one call for a usual tree), then every child of ours until none is
    # left: the subreaper makes each orphan of a killed process our child in turn
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    give_up = time.monotonic() + 5.0
    while time.monotonic() < give_up:
        if p.returncode is None:
            try:
                p.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        if p.returncode is not None and reap():
            return
        killed = children()
        for pid in killed:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if p.returncode is None or not killed:
            time.sleep(0.002)
            continue
        for pid in killed:  # our children, killed: each is reaped in moments (its own children
            try:  # are ours now, for the next round)
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

def leftovers(p):
    # after the program exited and was waited for: anything still ours is what it left behind
    if not reap():
        kill_tree(p)

def on_term(signum, frame):
    if current:
        kill_tree(current[0])
    os._exit(0)

signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGHUP, on_term)
signal.signal(signal.SIGINT, signal.SIG_IGN)
out = sys.stdout.buffer
for line in sys.stdin:
    try:
        req = json.loads(line)
    except ValueError:
        break
    start, stopped, late, chunks, sizes = time.monotonic(), "", False, {"out": [], "err": []}, {"out": 0, "err": 0}
    cap = int(req["cap"])
    try:
        p = subprocess.Popen(req["argv"], cwd=req["cwd"], env=req["env"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        err = ("cannot start %s: %s" % (req["argv"][0], exc.strerror)).encode()
        out.write(json.dumps({"rc": 127, "s": 0.0, "stopped": "", "out": 0, "err": len(err)}).encode() + b"\n" + err)
        out.flush()
        continue
    current[:] = [p]
    # one thread, no new ones: a run that used up its processes (RLIMIT_NPROC counts threads)
    # must not leave the driver unable to read it
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ, "out")
    sel.register(p.stderr, selectors.EVENT_READ, "err")
    try:
        exited = os.pidfd_open(p.pid)
        sel.register(exited, selectors.EVENT_READ, "exit")
    except (AttributeError, OSError):
        exited = None
    deadline = start + req["timeout"]

    def keep(name, block):
        if sizes[name] < cap:
            chunks[name].append(block[: cap - sizes[name]])
        sizes[name] += len(block)

    for pipe in (p.stdout, p.stderr):  # room for what it writes while we let it be (below)
        try:
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        except (AttributeError, OSError):
            pass
    pipes = 2
    while pipes:
        if time.monotonic() > deadline:
            late = True
            kill_tree(p)  # its pipes close with the last holder
            deadline = float("inf")
        got = False
        for key, _ in sel.select(timeout=0.05 if exited is None else 0.25):
            if key.data == "exit":
                sel.unregister(exited)
                continue
            block = os.read(key.fileobj.fileno(), 65536)
            if not block:
                sel.unregister(key.fileobj)
                pipes -= 1
                continue
            got = True
            keep(key.data, block)
            if sizes[key.data] > cap and not stopped:
                stopped = "stopped: its output passed %d MB" % (cap >> 20)
                kill_tree(p)
        if got and exited is not None and not stopped:
            # read in batches: a program that writes line by line (llama.cpp's log: ~30 writes
            # a run) would wake us for each; its exit still wakes us at once
            select.select([exited], [], [], max(0.0, min(BATCH, deadline - time.monotonic())))
        if pipes and p.poll() is not None:
            # the program is gone and its pipes are still open: what it wrote is in them already;
            # whatever it left behind (holding them or not) is not part of the run
            leftovers(p)
            for key in list(sel.get_map().values()):
                if key.data == "exit":
                    continue
                os.set_blocking(key.fileobj.fileno(), False)
                try:
                    while sizes[key.data] <= cap:
                        block = os.read(key.fileobj.fileno(), 65536)
                        if not block:
                            break
                        keep(key.data, block)
                except OSError:
                    pass
                sel.unregister(key.fileobj)
                pipes -= 1
    sel.close()

    def left():
        return max(0.0, min(deadline, start + req["timeout"]) - time.monotonic())

    if exited is not None:
        # its pipes are closed: wait for the exit itself on the pidfd (Popen.wait with a timeout
        # polls with sleeps, up to a few ms a run); both waits share what is left of the deadline
        select.select([exited], [], [], left())
        os.close(exited)
    try:  # let it exit by itself (killing it now would turn 0 into -9)
        rc = p.wait(timeout=left())
    except subprocess.TimeoutExpired:
        late = True
        kill_tree(p)
        rc = p.wait()
    leftovers(p)  # what it left running goes with it
    current[:] = []
    p.stdout.close()
    p.stderr.close()
    if sizes["out"] > cap or sizes["err"] > cap:
        stopped = stopped or "stopped: its output passed %d MB" % (cap >> 20)
    body_out, body_err = b"".join(chunks["out"]), b"".join(chunks["err"])
    head = {"rc": None if (stopped or late) else rc, "s": time.monotonic() - start, "stopped": stopped,
            "out": len(body_out), "err": len(body_err)}
    out.write(json.dumps(head).encode() + b"\n" + body_out + body_err)
    out.flush()
kill_tree(current[0]) if current else None
"""

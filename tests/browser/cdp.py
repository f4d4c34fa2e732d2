"""Minimal Chrome DevTools Protocol client over --remote-debugging-pipe.

Standard library only. Chromium reads NUL-terminated JSON commands from its
fd 3 and writes NUL-terminated JSON responses and events to its fd 4.
Usage: with Browser() as b: b.open("page.html"); b.click("#x"); b.errors
"""
import base64
import contextlib
import ctypes
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
COMMAND_TIMEOUT = 30.0  # seconds; hard limit for any single protocol command
READY_TIMEOUT = 20.0    # seconds to wait for window.qkvReady after load


class CDPError(RuntimeError):
    """Protocol failure, timeout, or a browser that went away."""


class JSError(RuntimeError):
    """An evaluated expression threw; the message holds the JS exception."""


class Browser:
    """A headless chromium with one attached page; close() kills it."""

    def __init__(self, width=1400, height=900):
        if not os.access(CHROMIUM, os.X_OK):
            raise CDPError("no chromium at %s (set $CHROMIUM)" % CHROMIUM)
        self.errors = []   # console errors / uncaught exceptions, as text
        self._events = []  # events not yet consumed by wait_event()
        self._buf, self._next_id, self._session = b"", 0, None
        self._profile = tempfile.mkdtemp(prefix="qkv-chromium-")
        self._log = open(os.path.join(self._profile, "chromium.log"), "wb")
        cmd_r, self._cmd_w = os.pipe()    # we write, chromium reads (its fd 3)
        self._resp_r, resp_w = os.pipe()  # chromium writes (its fd 4), we read
        libc = ctypes.CDLL(None)

        def child_setup():  # runs in the forked child before exec
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with us
            # Copy to fds >= 10 first so that neither dup2 clobbers the other
            # pipe; dup2 leaves fds 3 and 4 inheritable.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, resp_w)]
            for target, fd in zip((3, 4), high):
                os.dup2(fd, target)
                os.close(fd)

        # close_fds=False is safe: Python's own fds are non-inheritable, so
        # chromium gets only 0-4. A new session makes a killable process group.
        self._proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--remote-debugging-pipe", "--no-sandbox",
             "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--user-data-dir=" + self._profile,
             "--window-size=%d,%d" % (width, height), "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
            close_fds=False, preexec_fn=child_setup, start_new_session=True)
        os.close(cmd_r)
        os.close(resp_w)
        try:
            self._attach(width, height)
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Kill chromium's whole process group and remove the profile."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
                break
        os.close(self._cmd_w)
        os.close(self._resp_r)
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def _attach(self, width, height):
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        pages = [t["targetId"] for t in targets if t["type"] == "page"]
        if not pages:
            raise CDPError("no page target among %r" % targets)
        self._session = self.send("Target.attachToTarget", session=False,
                                  targetId=pages[0], flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(domain + ".enable")
        # The headless window size includes browser UI (900 -> 757 px of
        # viewport); pin the viewport itself so that screenshots are exact.
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def send(self, method, session=True, timeout=COMMAND_TIMEOUT, **params):
        """Send one command and return its result; events are queued."""
        if self._proc is None:
            raise CDPError("%s: browser is closed" % method)
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if session and self._session:
            msg["sessionId"] = self._session
        data = json.dumps(msg).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._cmd_w, data):]
        except OSError as e:  # broken pipe: chromium is gone
            self.close()
            raise CDPError("%s: cannot write to chromium: %s" % (method, e))
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline, method)
            if reply.get("id") == msg["id"]:
                if "error" in reply:
                    raise CDPError("%s failed: %s" % (method, reply["error"]))
                return reply.get("result", {})
            if "method" in reply:
                self._on_event(reply)

    def wait_event(self, method, timeout=COMMAND_TIMEOUT):
        """Return the params of the next (queued or new) event `method`."""
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self._events):
                if ev["method"] == method:
                    return self._events.pop(i).get("params", {})
            reply = self._read(deadline, "waiting for " + method)
            if "method" in reply:
                self._on_event(reply)

    def _read(self, deadline, what):
        """Return the next complete message; kill chromium on failure."""
        while b"\0" not in self._buf:
            left = max(deadline - time.monotonic(), 0)
            chunk = (os.read(self._resp_r, 1 << 20)
                     if select.select([self._resp_r], [], [], left)[0] else None)
            if not chunk:
                self.close()
                raise CDPError("%s: %s" % (what, "timed out" if chunk is None
                                             else "chromium exited"))
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def _on_event(self, ev):
        self._events = self._events[-200:] + [ev]  # bounded queue
        method, p = ev["method"], ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            args = [str(a.get("value", a.get("description", ""))) for a in p["args"]]
            self.errors.append("console.%s: %s" % (p["type"], " ".join(args)))
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text")
            self.errors.append("uncaught: %s (%s:%s)" % (
                text, d.get("url", ""), d.get("lineNumber", "?")))
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            e = p["entry"]
            if "favicon.ico" not in e.get("url", ""):  # browsers probe for it
                self.errors.append("log: %s %s" % (e["text"], e.get("url", "")))

    def open(self, path, ready_timeout=READY_TIMEOUT):
        """Load a local file and wait until window.qkvReady === true."""
        self._events = [e for e in self._events if e["method"] != "Page.loadEventFired"]
        res = self.send("Page.navigate", url="file://" + os.path.abspath(path))
        if res.get("errorText"):
            raise CDPError("cannot open %s: %s" % (path, res["errorText"]))
        self.wait_event("Page.loadEventFired")
        if not self.wait_for("window.qkvReady === true", ready_timeout):
            raise CDPError("window.qkvReady not true after %gs" % ready_timeout)

    def eval(self, expr):
        """Evaluate a JS expression (awaiting promises); return its JSON value."""
        res = self.send("Runtime.evaluate", expression=expr,
                        returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise JSError(d.get("exception", {}).get("description") or d.get("text"))
        return res["result"].get("value")

    def wait_for(self, expr, timeout=5.0, interval=0.1):
        """Poll until `expr` is truthy; return whether it became so in time."""
        deadline = time.monotonic() + timeout
        while not self.eval(expr):
            if time.monotonic() > deadline:
                return False
            time.sleep(interval)
        return True

    def settle(self):
        """Wait for two animation frames so that pending rendering is done."""
        self.eval("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    def center(self, selector, index=0):
        """Scroll the index-th match into view and return its centre (x, y)."""
        r = self.eval("""(el => { if (!el) return null;
            el.scrollIntoView({block: 'center', inline: 'center'});
            const r = el.getBoundingClientRect();
            return {x: r.left + r.width / 2, y: r.top + r.height / 2, w: r.width, h: r.height};
        })(document.querySelectorAll(%s)[%d])""" % (json.dumps(selector), index))
        if r is None:
            raise CDPError("no element matches %s (index %d)" % (selector, index))
        if r["w"] <= 0 or r["h"] <= 0:
            raise CDPError("element %s has zero size (hidden?)" % selector)
        return r["x"], r["y"]

    def mouse_move(self, x, y):
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def hover(self, selector, index=0):
        self.mouse_move(*self.center(selector, index))

    def click(self, selector, index=0):
        x, y = self.center(selector, index)
        self.mouse_move(x, y)
        for kind, buttons in (("mousePressed", 1), ("mouseReleased", 0)):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y,
                      button="left", buttons=buttons, clickCount=1)

    def key(self, key, code, key_code):
        """Press and release one key (e.g. "Escape", "Escape", 27)."""
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, code=code,
                      windowsVirtualKeyCode=key_code)

    def click_at(self, x, y):
        self.mouse_move(x, y)
        for kind, buttons in (("mousePressed", 1), ("mouseReleased", 0)):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y,
                      button="left", buttons=buttons, clickCount=1)

    def set_range(self, selector, value):
        """Set an <input type=range> and fire 'input' and 'change'."""
        ok = self.eval("""(el => { if (!el) return false; el.value = %s;
            for (const t of ['input', 'change'])
                el.dispatchEvent(new Event(t, {bubbles: true}));
            return true; })(document.querySelector(%s))""" % (
            json.dumps(str(value)), json.dumps(selector)))
        if not ok:
            raise CDPError("no element matches %s" % selector)

    def screenshot(self, path):
        data = self.send("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

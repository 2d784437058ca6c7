"""Loads a page in headless Chromium and reports what a reader would see: the result of a script
evaluated in the page, the console errors, uncaught exceptions, failed loads and every URL the
page requested. Talks the Chrome DevTools Protocol over --remote-debugging-pipe (messages are JSON
separated by NUL bytes; Chromium reads commands on fd 3 and writes replies and events on fd 4), so
it needs only Python's standard library.

Protocol reference: https://chromedevtools.github.io/devtools-protocol/ (Target, Page, Runtime,
Log, Network domains)."""
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time


class DevToolsError(Exception):
    pass


def find_chromium():
    """Debian's `chromium` package (scripts/setup.sh installs it); None when missing."""
    return shutil.which("chromium")


def _high_fd(fd):
    """Moves a pipe end above 3 and 4, where the child's ends must land, keeping it close-on-exec."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


class Page:
    """What loading one page produced."""

    def __init__(self):
        self.value = None            # the evaluated script's result (JSON value)
        self.console_errors = []     # console.error/assert calls, uncaught exceptions, error log entries
        self.failed_loads = []       # Network.loadingFailed
        self.urls = []               # every URL the page requested


class Chromium:
    def __init__(self, binary, timeout_s=60.0):
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="tpusim-chromium-")
        self.log = open(os.path.join(self.profile, "chromium.log"), "w+")
        to_r, self._to_w = map(_high_fd, os.pipe())
        self._from_r, from_w = map(_high_fd, os.pipe())

        def child_fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        cmd = [binary, "--headless", "--remote-debugging-pipe",
               # The sandbox needs user namespaces, which containers and root (CI) do not give; the
               # browser only ever loads the test's own local page.
               "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--mute-audio",
               "--window-size=1280,1000", f"--user-data-dir={self.profile}", "about:blank"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     preexec_fn=child_fds, close_fds=False)
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._next_id = 0
        self._events = []

    def log_tail(self, lines=15):
        self.log.flush()
        self.log.seek(0)
        return "".join(self.log.readlines()[-lines:])

    def _read_message(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DevToolsError("no reply from Chromium in time; its log ends with:\n" + self.log_tail())
            ready, _, _ = select.select([self._from_r], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_r, 1 << 16)
            if not chunk:
                raise DevToolsError("Chromium closed the DevTools pipe; its log ends with:\n"
                                    + self.log_tail())
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=None):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self._to_w, data):]
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def _take_events(self):
        events, self._events = self._events, []
        return events

    def _pump(self, seconds):
        """Collects events for `seconds` (late console messages arrive after the load event)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                self._events.append(self._read_message(deadline))
        except DevToolsError:
            if self.proc.poll() is not None:
                raise

    def load(self, url, script, screenshot=None):
        """Opens `url` in a new tab, waits for its load event, then evaluates `script` (an
        expression, awaited if it is a promise) and collects what the page reported. With
        `screenshot` (a path), also writes a PNG of the whole page, as laid out at 1280 px wide."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        nav = self.send("Page.navigate", {"url": url}, session=session)
        if nav.get("errorText"):
            raise DevToolsError(f"{url}: {nav['errorText']}")
        deadline = time.monotonic() + self.timeout_s
        while not any(e.get("method") == "Page.loadEventFired" and e.get("sessionId") == session
                      for e in self._events):
            self._events.append(self._read_message(deadline))
        result = self.send("Runtime.evaluate", {"expression": script, "awaitPromise": True,
                                                "returnByValue": True}, session=session)
        if "exceptionDetails" in result:
            raise DevToolsError(f"the check script failed: {result['exceptionDetails']}")
        if screenshot:
            shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                             session=session)
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        self._pump(0.5)

        page = Page()
        page.value = result["result"].get("value")
        urls = {}
        for e in self._take_events():
            if e.get("sessionId") != session:
                continue
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                page.console_errors.append(
                    "console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description", "")))
                                                          for a in p.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                what = d.get("exception", {}).get("description", d.get("text", ""))
                page.console_errors.append(f"uncaught: {what}")
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                entry = p["entry"]
                page.console_errors.append(
                    f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
            elif method == "Network.requestWillBeSent":
                urls[p.get("requestId")] = p.get("request", {}).get("url", "")
                page.urls.append(urls[p.get("requestId")])
            elif method == "Network.loadingFailed":
                why = p.get("errorText") or p.get("blockedReason") or "failed"
                page.failed_loads.append(f"{urls.get(p.get('requestId'), '?')}: {why}")
        self.send("Target.closeTarget", {"targetId": target})
        return page

    def close(self):
        try:
            if self.proc.poll() is None:
                self.send("Browser.close")
        except (DevToolsError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_w)
        os.close(self._from_r)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

"""Screenshot an HTML report to a PNG with headless Chromium (no network, no server).

    python tools/screenshot_report.py out/quickstart/report.html docs/report-quickstart.png \\
        [--width 1280] [--height 2400] [--timeout 60] [--colors 64]

The page is opened as a ``file://`` URL with networking switched off (a proxy that does not
exist), so a screenshot also shows that the report needs nothing from the network. Chromium is
looked up as ``chromium``, ``chromium-browser``, ``google-chrome`` (or ``$CHROMIUM``); on Debian,
``apt-get install -y chromium``. Nothing in the test suite depends on it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str:
    """The Chromium executable to use.

    Raises:
        FileNotFoundError: none is installed (the message says how to install one).
    """
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        if shutil.which(explicit) is None:
            raise FileNotFoundError(f"$CHROMIUM is {explicit!r}, which is not an executable")
        return explicit
    for name in BROWSERS:
        found = shutil.which(name)
        if found is not None:
            return found
    raise FileNotFoundError(
        f"no headless Chromium found (looked for {', '.join(BROWSERS)}); install it with "
        "`apt-get install -y chromium` or set $CHROMIUM to its path"
    )


def screenshot(
    report: Path,
    output: Path,
    *,
    width: int = 1280,
    height: int = 2400,
    timeout: float = 60,
    colors: int | None = None,
) -> Path:
    """Render ``report`` to the PNG ``output`` with headless Chromium; returns ``output``.

    ``colors`` reduces the PNG to a palette of that many colours (needs Pillow).

    Raises:
        FileNotFoundError: no report, or no Chromium.
        RuntimeError: Chromium failed or wrote no image.
    """
    report = report.resolve()
    if not report.is_file():
        raise FileNotFoundError(f"{report} does not exist")
    output = output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    browser = find_chromium()
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",  # containers run as root, where Chromium's sandbox cannot start
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-extensions",
            # Every network request goes to a proxy that does not exist: a page that needs the
            # network renders visibly broken instead of quietly fetching.
            "--proxy-server=http://127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={output}",
            report.as_uri(),
        ]
        if output.exists():
            output.unlink()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{browser} did not finish within {timeout:.0f}s") from None
    if done.returncode != 0 or not output.is_file():
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{browser} exited with {done.returncode}: {detail[0]}")
    if colors is not None:
        _quantize(output, colors)
    return output


def _quantize(path: Path, colors: int) -> None:
    """Rewrite a PNG with a palette of at most ``colors`` colours (a page of text and flat
    charts needs few; the file shrinks to about a third)."""
    try:
        from PIL import Image
    except ImportError:
        raise RuntimeError("--colors needs Pillow (pip install pillow)") from None
    with Image.open(path) as image:
        # Octree keeps small areas of distinct colour (a red marker line); median cut merges them.
        reduced = image.convert("RGB").quantize(
            colors=colors, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
        )
    reduced.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    """CLI entry; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="screenshot_report.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("report", type=Path, help="the HTML file")
    parser.add_argument("output", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1280, help="viewport width in pixels")
    parser.add_argument("--height", type=int, default=2400, help="viewport height in pixels")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for Chromium")
    parser.add_argument(
        "--colors", type=int, default=None, help="reduce to a palette of N colours (Pillow)"
    )
    args = parser.parse_args(argv)
    try:
        path = screenshot(**vars(args))  # the options are named as its parameters
    except (FileNotFoundError, RuntimeError) as err:
        print(f"screenshot_report: error: {err}", file=sys.stderr)
        return 2
    print(f"{path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

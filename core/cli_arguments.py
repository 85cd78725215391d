"""Argument types shared by the commands' parsers: each refuses a bad value with the reason (an
argparse error, exit 2) before anything is opened, where a plain ``type=int`` or ``str`` let it
through to a traceback or a quiet surprise later."""

from __future__ import annotations

import argparse

from core.text_validation import label_problem


def port_arg(value: str) -> int:
    """A TCP port, 1-65535 (0 asks the system for any free port, which no user can then find)."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: a port is 1 to 65535")
    return port


def label_arg(value: str) -> str:
    """A short name a person gives (a key's label, a title, a collection), trimmed; refused as
    core.text_validation.label_problem says."""
    text = value.strip()
    problem = label_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def path_arg(value: str) -> str:
    """A file or folder named on the command line: not empty ("" is no path; Path("") is the current folder)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("the path is empty")
    return value

"""Compiled replay: tapegrad.compile records a step once and replays its tape in one
compiled call (see compiled.py for the API, recorder.py for recording, plan.py for the
program and memory plan, _run.py for the executor)."""

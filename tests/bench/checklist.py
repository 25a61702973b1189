"""The one way the bench and tool tests (tests/bench/*_test.py) keep their checks: each printed as it is made, the
failed ones remembered, and the script's exit status from them."""
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def verdict(name):
    """Prints how many checks failed and which; returns the exit status (1 if any failed)."""
    print(f"{name}: {len(failures)} failed" + "".join("\n  " + f for f in failures) if failures else f"{name}: all passed")
    return 1 if failures else 0

"""The README's quick start service (`reminders.py`): a virtual object with a durable sleep and an awakeable.

`tests/integration/test_readme.py` checks that the README shows this file as it is and runs the
README's commands against it.
"""

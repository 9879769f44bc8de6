"""WorkflowAPI (upstream `sdk-tests` WorkflowAPI): a workflow blocked on a durable promise, unblocked by a
shared handler; its result through attach and output; a second submission is PreviouslyAccepted."""

from __future__ import annotations

from tests.conformance.harness import Env, idem, poll_until


def test_set_and_resolve(env: Env) -> None:
    workflow = idem()
    sent = env.send("BlockAndWaitWorkflow", "run", "Francesco", key=workflow)
    assert sent.status_code == 202, sent.text
    assert sent.json()["status"] == "Accepted"
    invocation_id = sent.json()["invocationId"]

    def state_set() -> bool:
        reply = env.call("BlockAndWaitWorkflow", "getState", key=workflow)
        assert reply.status_code == 200, reply.text
        assert reply.content, "no state yet"  # a handler returning None answers an empty body
        assert reply.json()
        return True

    poll_until(state_set)

    # blocked on the promise: no output yet
    pending = env.ingress.get(f"/restate/workflow/BlockAndWaitWorkflow/{workflow}/output")
    assert pending.status_code == 470, pending.text

    reply = env.call("BlockAndWaitWorkflow", "unblock", "Till", key=workflow, idempotency_key=idem())
    assert reply.status_code == 200, reply.text

    attached = env.ingress.get(f"/restate/workflow/BlockAndWaitWorkflow/{workflow}/attach")
    assert attached.status_code == 200, attached.text
    assert attached.json() == "Till"

    output = env.ingress.get(f"/restate/workflow/BlockAndWaitWorkflow/{workflow}/output")
    assert output.status_code == 200, output.text
    assert output.json() == "Till"

    again = env.send("BlockAndWaitWorkflow", "run", "Francesco", key=workflow)
    assert again.status_code == 202, again.text
    assert again.json()["status"] == "PreviouslyAccepted"
    assert again.json()["invocationId"] == invocation_id
    output = env.ingress.get(f"/restate/workflow/BlockAndWaitWorkflow/{workflow}/output")
    assert output.json() == "Till"

    # a request/response run of a workflow that already ran is refused
    sync_again = env.call("BlockAndWaitWorkflow", "run", "Francesco", key=workflow)
    assert sync_again.status_code == 409, sync_again.text

"""Every job's own credentials, with a real hub, the real service and real
job processes: the service issues the job's owner a hub token limited to
``access:services!service=frachub`` and ``custom:frachub:job`` when the job starts, puts it in
the job's environment with ``FRACHUB_URL``, and revokes it when the job ends.

The job's token reaches its own job and nothing else: it cannot submit, list, cancel (its
own job or another), checkpoint another job of its owner, see another user's work, or act in
the hub; after the job ends the hub refuses it. It survives a restart of the service."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from hubharness import module_service, running_hub
from service_client import (
    service_config,
    submit,
    wait_for,
    wait_state,
    wait_token_refused,
    workload,
)
from sqlalchemy import select

from scheduler.backends.base import Exit, JobSpec
from scheduler.backends.local import LocalBackend
from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.common.scopes import JOB_TOKEN_SCOPES
from scheduler.service.hub.jobtokens import TOKEN_KEY, CredentialedBackend, HubTokens, token_id_of
from scheduler.service.hub.revocations import RETRY_SECONDS
from scheduler.service.persistence.orm import RevocationRecord
from scheduler.service.persistence.store import Store, open_store

ONE_LINER = (
    f"{shlex.quote(sys.executable)} -c 'from hub_ext.client import checkpointed; checkpointed()'"
)
# the job prints its token's hub id and the token (its owner may read its log anyway), then
# says it checkpointed with nothing set by its owner
JOB = (
    'echo "url=$FRACHUB_URL"; echo "token=$JUPYTERHUB_API_TOKEN"; '
    f"{ONE_LINER} && echo told; trap 'exit 0' TERM; sleep 120 & wait"
)

service = module_service(service_config(gpus=2, grace=1), "job-tokens")


def job_token(client: httpx.Client, workload_id: int) -> str:
    logs = f"workloads/{workload_id}/logs"
    text = wait_for(
        lambda: (t := client.get(logs).text) and "told" in t and t, 30, "the job's report"
    )
    match = re.search(r"^token=(\S+)$", text, re.M)
    assert match, text
    return match.group(1)


def test_a_job_checkpoints_with_its_own_token_and_nothing_else(
    service, hub, make_user, api
) -> None:
    alice_name, alice_token = make_user(groups=["vision"])
    alice = api(alice_token)
    bob = api(make_user(groups=["vision"])[1])
    other = submit(alice, command="trap 'exit 0' TERM; sleep 120 & wait", gpus=0.5, name="other")
    bobs = submit(bob, command="trap 'exit 0' TERM; sleep 120 & wait", gpus=0.5, name="bobs")
    job = submit(alice, command=JOB, gpus=0.5, name="saver")
    token = job_token(alice, job["id"])
    assert workload(alice, job["id"])["checkpointed_at"] is not None
    logs = alice.get(f"workloads/{job['id']}/logs").text
    assert f"url={hub.service_bind_url}/services/frachub/" in logs

    # in the hub: a token of alice's with the two scopes, and no more
    model = hub.whoami(token)
    assert model["name"] == alice_name and model["kind"] == "user"
    assert {"access:services!service=frachub", "custom:frachub:job"} <= set(model["scopes"])
    assert not {"custom:frachub:read", "custom:frachub:submit"} & set(model["scopes"])
    own = httpx.post(
        f"{hub.api_url}/users/{alice_name}/tokens",
        headers={"Authorization": f"token {token}"},
        json={"note": "more"},
        timeout=30,
    )
    assert own.status_code == 403, own.text

    mine = api(token)
    seen = mine.get(f"workloads/{job['id']}")
    assert seen.status_code == 200 and seen.json()["name"] == "saver"
    again = mine.post(f"workloads/{job['id']}/checkpoint")
    assert again.status_code == 200
    refusals = {
        "submit": mine.post("workloads", json={"command": "true", "gpus": 0.5}),
        "list": mine.get("workloads"),
        "cancel itself": mine.delete(f"workloads/{job['id']}"),
        "cancel another": mine.delete(f"workloads/{other['id']}"),
        "queues": mine.get("queues"),
    }
    for what, answer in refusals.items():
        assert answer.status_code == 403, (what, answer.text)
        assert "needs the scope custom:frachub:" in answer.json()["message"], (what, answer.text)
    for path in (
        f"workloads/{other['id']}",
        f"workloads/{other['id']}/checkpoint",
        f"workloads/{bobs['id']}",
        f"workloads/{bobs['id']}/checkpoint",
    ):
        answer = mine.post(path) if path.endswith("checkpoint") else mine.get(path)
        assert answer.status_code == 404, (path, answer.text)
    assert workload(alice, other["id"])["checkpointed_at"] is None
    assert workload(alice, other["id"])["state"] == "running"

    alice.delete(f"workloads/{job['id']}")
    wait_state(alice, job["id"], "cancelled")
    wait_token_refused(hub.api_url, token)
    for item in (other, bobs):
        owner = alice if item is other else bob
        owner.delete(f"workloads/{item['id']}")
        wait_state(owner, item["id"], "cancelled")


def test_a_running_jobs_token_outlives_a_restart_of_the_service_and_dies_with_the_job(
    service, hub, make_user, api
) -> None:
    alice = api(make_user(groups=["vision"])[1])
    job = submit(alice, command=JOB, gpus=0.5, name="long")
    token = job_token(alice, job["id"])
    service.restart()
    assert hub.whoami(token)["scopes"]
    mine = api(token)
    told = mine.post(f"workloads/{job['id']}/checkpoint")
    assert told.status_code == 200, told.text
    alice.delete(f"workloads/{job['id']}")
    wait_state(alice, job["id"], "cancelled")
    wait_token_refused(hub.api_url, token)


# --- the wrapper in-process, on the real local backend and the real hub --------------------------


def local_backend(tmp_path) -> LocalBackend:
    return LocalBackend(
        data_dir=str(tmp_path / "data"),
        inventory_source="declared",
        declared_inventory=[{"name": "local", "gpus": 2, "gpu_memory_gib": 80}],
        run_as_user=False,
    )


def spec(workload_id: int, user: str, command: str) -> JobSpec:
    return JobSpec(
        workload_id=workload_id,
        name=f"job-{workload_id}",
        user=user,
        project="vision",
        command=command,
        working_dir=None,
        env={"JUPYTERHUB_API_TOKEN": "the owner's own, overridden"},
        placement=(ReplicaPlacement("local", (GpuShare(0, 500),)),),
    )


PRINTS_TOKEN = 'echo "token=$JUPYTERHUB_API_TOKEN"; sleep 30'


def log_text(backend: CredentialedBackend, workload_id: int) -> str:
    path = backend.log_path(workload_id)
    assert path is not None
    with open(path) as log:
        return log.read()


def printed_token(backend: CredentialedBackend, workload_id: int) -> str:
    text = wait_for(lambda: "token=" in (t := log_text(backend, workload_id)) and t, 10, "token")
    match = re.search(r"^token=(\S+)$", text, re.M)
    assert match, text
    return match.group(1)


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has ended: no longer in /proc, or a zombie its parent has not reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_a_job_that_was_gone_after_a_restart_has_its_token_revoked(hub, make_user, tmp_path):
    """A restarted service adopts each running attempt from its stored handle; one whose
    process is gone gets no exit from the backend, and its token is revoked all the same."""
    user, _ = make_user(groups=["vision"])
    tokens = HubTokens(hub.api_url, hub.frachub_token)

    async def scenario() -> None:
        first = CredentialedBackend(local_backend(tmp_path), tokens, "http://svc/", 3600)
        handle = await first.start(spec(41, user, PRINTS_TOKEN))
        token_id = token_id_of(handle)
        assert token_id is not None and "token" not in json.dumps(handle).replace(TOKEN_KEY, "")
        token = printed_token(first, 41)
        assert hub.whoami(token)["token_id"] == token_id  # the job got the token, not the env's
        await first.stop(41, handle, 0)
        assert [e.workload_id for e in await exits_until(first, 1)] == [41]
        # the exit was seen by the first incarnation: revoked (after the end was reported)
        await first.revocations.settle()
        assert await token_refused(hub, token)

        second_handle = await first.start(spec(42, user, PRINTS_TOKEN))
        token = printed_token(first, 42)
        await first.backend.stop(42, {k: v for k, v in second_handle.items() if k != TOKEN_KEY}, 0)
        # it ended while "the service was down": nobody polled
        pids = [replica["pid"] for replica in second_handle["replicas"]]
        deadline = time.monotonic() + 10
        while not all(process_gone(pid) for pid in pids):
            assert time.monotonic() < deadline, f"the killed job's processes {pids} still run"
            await asyncio.sleep(0.02)
        restarted = CredentialedBackend(local_backend(tmp_path), tokens, "http://svc/", 3600)
        # killed with its wrapper: no exit file, so no exit will ever be reported
        assert restarted.adopt(42, second_handle) is False
        assert await restarted.poll() == []
        await restarted.revocations.settle()
        assert await token_refused(hub, token)

    asyncio.run(scenario())


def stored_revocations(store: Store) -> dict[str, str]:
    """The ``pending_revocations`` table as the database has it: token id -> user."""
    with store.engine.connect() as connection:
        rows = connection.execute(select(RevocationRecord.token_id, RevocationRecord.user))
        return {token_id: user for token_id, user in rows}


def test_an_ended_jobs_token_is_revoked_after_a_restart_between_its_end_and_the_revocation(
    hub, make_user, tmp_path
):
    """The end is reported before the token is revoked (the revocation goes on in the
    background); a service that stops in between has stored the token, and its next start
    revokes it. Before, the poll revoked first and reported after."""
    user, _ = make_user(groups=["vision"])
    tokens = HubTokens(hub.api_url, hub.frachub_token)
    url = f"sqlite:///{tmp_path / 'frachub.sqlite'}"

    async def scenario() -> None:
        store = open_store(url)
        first = CredentialedBackend(
            local_backend(tmp_path), tokens, "http://svc/", 3600, store=store
        )
        handle = await first.start(spec(43, user, PRINTS_TOKEN))
        token_id = token_id_of(handle)
        token = printed_token(first, 43)
        await first.stop(43, handle, 0)
        deadline = time.monotonic() + 15
        while not (reports := await first.poll()):  # no pause after the poll that reports it
            assert time.monotonic() < deadline, "the stopped job's exit was never reported"
            await asyncio.sleep(0.1)
        assert [r.workload_id for r in reports if isinstance(r, Exit)] == [43]
        # the end is reported and its token stored, not revoked yet; the service stops now
        assert stored_revocations(store) == {token_id: user}
        await first.close()
        store.close()
        assert hub.whoami(token)["token_id"] == token_id  # still valid: nobody revoked it

        restarted_store = open_store(url)
        restarted = CredentialedBackend(
            local_backend(tmp_path), tokens, "http://svc/", 3600, store=restarted_store
        )
        assert restarted.revocations.pending == {}
        assert await restarted.poll() == []  # its first poll takes up what was stored
        await restarted.revocations.settle()
        assert await token_refused(hub, token)
        assert stored_revocations(restarted_store) == {}
        await restarted.close()
        restarted_store.close()

    asyncio.run(scenario())


def test_a_revocation_the_hub_does_not_answer_is_kept_and_tried_again(
    hub, make_user, tmp_path, caplog
):
    """A revocation that fails (the hub unreachable, after ``HubTokens``' own tries) stays
    stored and is sent again ``RETRY_SECONDS`` later, when the hub answers."""
    user, _ = make_user(groups=["vision"])
    tokens = HubTokens(hub.api_url, hub.frachub_token)
    store = open_store(f"sqlite:///{tmp_path / 'frachub.sqlite'}")
    now = [1000.0]

    async def scenario() -> None:
        backend = CredentialedBackend(
            local_backend(tmp_path), tokens, "http://svc/", 3600, store=store
        )
        backend.revocations.clock = lambda: now[0]
        handle = await backend.start(spec(44, user, PRINTS_TOKEN))
        token_id = token_id_of(handle)
        token = printed_token(backend, 44)
        # the hub cannot be reached while the end is heard (a port nothing listens on)
        backend.revocations.tokens = HubTokens("http://127.0.0.1:9/hub/api", "x", timeout=2)
        await backend.stop(44, handle, 0)
        await exits_until(backend, 1)
        await backend.revocations.settle()
        assert "is not revoked yet" in caplog.text
        assert stored_revocations(store) == {token_id: user}
        assert hub.whoami(token)["token_id"] == token_id

        backend.revocations.tokens = tokens  # the hub is back
        await backend.poll()
        await backend.revocations.settle()
        assert stored_revocations(store) == {token_id: user}, "tried again before its time"
        now[0] += RETRY_SECONDS
        await backend.poll()
        await backend.revocations.settle()
        assert stored_revocations(store) == {}
        assert await token_refused(hub, token)
        await backend.close()

    try:
        asyncio.run(scenario())
    finally:
        store.close()


def test_an_end_is_reported_and_its_token_revoked_when_the_store_refuses_to_keep_it(
    hub, make_user, tmp_path, caplog
):
    """A database that refuses the pending revocation (here its table is gone) costs only
    the promise across a restart, said in the log: the end is reported and the token
    revoked all the same."""
    user, _ = make_user(groups=["vision"])
    tokens = HubTokens(hub.api_url, hub.frachub_token)
    store = open_store(f"sqlite:///{tmp_path / 'frachub.sqlite'}")
    with store.engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE pending_revocations")

    async def scenario() -> None:
        backend = CredentialedBackend(
            local_backend(tmp_path), tokens, "http://svc/", 3600, store=store
        )
        handle = await backend.start(spec(45, user, PRINTS_TOKEN))
        token = printed_token(backend, 45)
        await backend.stop(45, handle, 0)
        assert [e.workload_id for e in await exits_until(backend, 1)] == [45]
        await backend.revocations.settle()
        assert await token_refused(hub, token)
        assert "could not be read" in caplog.text  # the first poll's look for leftovers
        assert "could not be stored before their revocation" in caplog.text
        await backend.close()

    try:
        asyncio.run(scenario())
    finally:
        store.close()


def test_a_job_starts_without_a_token_when_the_hub_cannot_issue_one(tmp_path, caplog):
    tokens = HubTokens("http://127.0.0.1:9/hub/api", "nobody", timeout=2)

    async def scenario() -> None:
        backend = CredentialedBackend(local_backend(tmp_path), tokens, "http://svc/", 3600)
        handle = await backend.start(spec(43, "alice", 'echo "token=${FRACHUB_URL:-none}"'))
        assert token_id_of(handle) is None
        assert [e.exit_code for e in await exits_until(backend, 1)] == [0]
        assert "token=none" in log_text(backend, 43)

    asyncio.run(scenario())
    assert "starts without its own API token" in caplog.text


async def exits_until(backend, count: int, timeout: float = 15.0) -> list[Exit]:
    found: list[Exit] = []
    deadline = time.monotonic() + timeout
    while len(found) < count:
        assert time.monotonic() < deadline, f"waited {timeout}s for {count} exit(s)"
        found += [r for r in await backend.poll() if isinstance(r, Exit)]
        await asyncio.sleep(0.1)
    return found


async def token_refused(hub, token: str) -> bool:
    async with httpx.AsyncClient() as client:
        answer = await client.get(
            f"{hub.api_url}/user", headers={"Authorization": f"token {token}"}, timeout=30
        )
    return answer.status_code == 403


def test_a_hub_that_caps_token_lifetimes_gives_its_own_maximum(tmp_path) -> None:
    """``JupyterHub.token_expires_in_max_seconds`` below the service's lifetime: the hub
    refuses the longer one (400), and the service asks again for the hub's maximum."""
    extra = "c.JupyterHub.token_expires_in_max_seconds = 600"
    with running_hub(tmp_path / "capped", extra_config=extra) as capped:
        capped.create_user("dana")
        tokens = HubTokens(capped.api_url, capped.frachub_token)
        token, token_id = asyncio.run(tokens.issue("dana", "frachub job 1 (x), attempt 1", 86400))
        model = capped.harness_request("GET", f"/users/dana/tokens/{token_id}").json()
        assert model["note"] == "frachub job 1 (x), attempt 1"
        # and what the hub adds to every token: identifying its owner
        extra = set(model["scopes"]) - set(JOB_TOKEN_SCOPES)
        assert set(JOB_TOKEN_SCOPES) <= set(model["scopes"])
        assert all(s.startswith("read:users:") and s.endswith("!user=dana") for s in extra), extra
        expires = datetime.fromisoformat(model["expires_at"].replace("Z", "+00:00"))
        assert 0 < (expires - datetime.now(UTC)).total_seconds() <= 600
        assert capped.whoami(token)["name"] == "dana"


def test_token_requests_never_wait_in_the_shared_clients_timed_queue(hub, make_user) -> None:
    """Tornado's shared HTTP client sends 10 requests at once and times the rest from the
    moment they queue: with its 10 connections held by the service's other hub calls (here
    ten requests to a server that does not answer), a job's token request used to time out
    in that queue ("Timeout in request queue") and the job started without its token. Token
    requests have their own connections now, and wait for them untimed."""
    from tornado.httpclient import AsyncHTTPClient

    user, _ = make_user(groups=["vision"])
    tokens = HubTokens(hub.api_url, hub.frachub_token, timeout=1.0)

    async def scenario() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(30)
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        shared = AsyncHTTPClient()
        stalled = [
            asyncio.ensure_future(shared.fetch(f"http://127.0.0.1:{port}/", request_timeout=20))
            for _ in range(shared.max_clients)
        ]
        try:
            await asyncio.sleep(0.2)  # they hold every connection of the shared client
            answers = await asyncio.gather(
                *(tokens.issue(user, f"burst {n}", 600) for n in range(20))
            )
            assert len({token_id for _, token_id in answers}) == 20
            for _, token_id in answers:
                await tokens.revoke(user, token_id)
        finally:
            for request in stalled:
                request.cancel()
            server.close()

    asyncio.run(scenario())

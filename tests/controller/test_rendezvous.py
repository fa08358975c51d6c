"""A gang's rendezvous: every node gets torchrun's variables and a hostfile,
built in the one place job variables are built (``AgentGateway._assignment``)."""

from __future__ import annotations

from pathlib import Path

from spotfleet.agent.runner import write_hostfile
from spotfleet.controller.agents import RENDEZVOUS_PORT_BASE, RENDEZVOUS_PORT_SPAN, rendezvous_port
from spotfleet.providers.fake import FakeProvider, gpu_offering
from spotfleet.store import Store
from spotfleet.wire import Assignment
from tests.controller.harness import Harness, make_harness

TORCH_NAMES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "NNODES", "NPROC_PER_NODE")


def harness(store: Store, tmp_path: Path) -> Harness:
    return make_harness(store, tmp_path, FakeProvider(offering_list=[gpu_offering("p3.8xlarge", gpus=4)]))


def gang_assignments(store: Store, tmp_path: Path) -> tuple[list[Assignment], dict[str, str]]:
    h = harness(store, tmp_path)
    job = h.submit(name="ddp", resources={"gpus": 2, "nodes": 2}, priority="opportunistic")
    h.step()
    h.register_all()
    h.step()
    job = h.job(job.id)
    by_rank = {b.node_rank: b.instance_id for b in job.bindings}
    assert sorted(by_rank) == [0, 1] and by_rank[0] != by_rank[1]
    out = []
    for rank in (0, 1):
        answer = h.beat(by_rank[rank])
        out += [a for a in answer.assignments if a.job_id == job.id and a.node_rank == rank]
    addresses = {i: str(h.instance(i).address) for i in by_rank.values()}
    return out, addresses


def test_every_gang_node_gets_torchruns_variables_with_rank_zeros_address(store: Store, tmp_path: Path) -> None:
    (a0, a1), addresses = gang_assignments(store, tmp_path)
    assert all(addresses.values()) and len(set(addresses.values())) == 2, "the fake provider reports addresses"
    master = addresses[a0.peers[0]]
    for rank, a in enumerate((a0, a1)):
        env = a.env
        assert env["MASTER_ADDR"] == master
        assert env["MASTER_PORT"] == str(rendezvous_port(a.job_id, a.attempt))
        assert (env["NNODES"], env["NODE_RANK"], env["NPROC_PER_NODE"]) == ("2", str(rank), "2")
        assert (env["WORLD_SIZE"], env["RANK"]) == ("4", str(rank * 2)), "4 processes; a node's first global rank"
        assert (env["SPOTFLEET_NODE_RANK"], env["SPOTFLEET_NUM_NODES"]) == (str(rank), "2")
        assert a.peer_addresses == [addresses[p] for p in a.peers]
    assert a0.peers == a1.peers and a0.env["MASTER_PORT"] == a1.env["MASTER_PORT"]


def test_a_cpu_gang_runs_one_process_per_node_and_the_specs_own_values_win(store: Store, tmp_path: Path) -> None:
    h = harness(store, tmp_path)
    job = h.submit(name="cpu-ddp", resources={"gpus": 0, "nodes": 2}, env={"MASTER_PORT": "12345"},
                   priority="opportunistic")  # fmt: skip
    h.step()
    h.register_all()
    h.step()
    job = h.job(job.id)
    rank1 = next(b for b in job.bindings if b.node_rank == 1)
    (a,) = [x for x in h.beat(rank1.instance_id).assignments if x.job_id == job.id]
    assert (a.env["NPROC_PER_NODE"], a.env["WORLD_SIZE"], a.env["RANK"]) == ("1", "2", "1")
    assert a.env["MASTER_PORT"] == "12345", "a port the spec fixes is kept"


def test_a_single_node_job_gets_no_rendezvous(store: Store, tmp_path: Path) -> None:
    h = harness(store, tmp_path)
    job = h.submit(name="solo", resources={"gpus": 1}, priority="opportunistic")
    h.step()
    h.register_all()
    h.step()
    (a,) = h.beat(h.job(job.id).instance_ids[0]).assignments
    assert not set(TORCH_NAMES) & set(a.env) and a.peer_addresses == []


def test_the_port_is_a_fixed_function_of_job_and_attempt_below_the_ephemeral_range() -> None:
    assert rendezvous_port("job-abc", 1) == rendezvous_port("job-abc", 1)
    ports = {rendezvous_port(f"job-{i}", a) for i in range(200) for a in (1, 2)}
    assert all(RENDEZVOUS_PORT_BASE <= p < RENDEZVOUS_PORT_BASE + RENDEZVOUS_PORT_SPAN < 32768 for p in ports)
    assert len(ports) > 350, "spread over the range"
    assert rendezvous_port("job-abc", 1) != rendezvous_port("job-abc", 2)


def test_the_hostfile_lists_every_node_by_rank(tmp_path: Path) -> None:
    a = Assignment(job_id="j", attempt=1, node_rank=1, num_nodes=3, name="j", command="true", checkpoint_dir="/c",
                   env={"NPROC_PER_NODE": "8"}, peers=["i-0", "i-1", "i-2"],
                   peer_addresses=["10.0.0.5", "10.0.0.6", ""])  # fmt: skip
    path = write_hostfile(tmp_path / "hosts", a)
    assert path.read_text() == "10.0.0.5 slots=8\n10.0.0.6 slots=8\ni-2 slots=8\n"

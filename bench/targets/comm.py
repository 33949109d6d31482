"""Targets of the comm suite (issue 4), from one run of hg-bench-comm and its peers."""
from report import Target

SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 24)


def inproc(bench, n, m, variant=0):
    """Median seconds per call (the statistic the MPI peers report; on a shared machine the
    mean is dominated by descheduled calls), or the mean where no median was recorded."""
    e = bench[f"BM_inproc_allreduce/{n}/{m}/{variant}/min_time:0.200/manual_time"]
    return e["median_us"] * 1e-6 if "median_us" in e else e["real_time"] * 1e-6


def inproc_mean(bench, n, m, variant=0):
    return bench[f"BM_inproc_allreduce/{n}/{m}/{variant}/min_time:0.200/manual_time"]["real_time"] * 1e-6


def peer(peers, name, n, m, run=None):
    """Median seconds of `name` at n ranks and m floats; `run` picks the program run it came
    from (the MPI peers' "run": the entries interleaved in one process, e.g. "raw_mpi+hg_mpi";
    a record without one counts as a run of its own name)."""
    for r in peers.get("runs", []):
        if r["name"] == name and r["ranks"] == n and r["floats"] == m and (
                run is None or r.get("run", r["name"]) == run):
            return r["seconds"]
    raise KeyError(f"{name} {n} ranks {m} floats" + (f" in run {run}" if run else ""))


def raw(peers, n, m):
    """Raw MPI_Allreduce measured alone (its own program)."""
    return peer(peers, "raw_mpi", n, m, run="raw_mpi")


def targets(bench, peers):
    out = []
    us = lambda s: f"{s * 1e6:.2f} us"
    # 2 ranks, 1K floats: under 0.5 us and >= 3x faster than raw MPI.
    t1k = inproc(bench, 2, 1 << 10)
    out.append(Target("comm: inproc 2 ranks 1K floats time (median call)", t1k * 1e6, 0.5, op="<=", unit=" us",
                      note=f"mean {us(inproc_mean(bench, 2, 1 << 10))}"))
    out.append(Target("comm: raw MPI / inproc, 2 ranks, 1K floats", raw(peers, 2, 1 << 10) / t1k, 3.0,
                      note=f"{us(raw(peers, 2, 1 << 10))} vs {us(t1k)}"))
    # Context: inproc's per-call median against two bare two-thread references of this machine:
    # the handoff floor (flag + the peer's freshly written 4 KiB; BM_handoff_reference) and the
    # owner-computes protocol with flags only (BM_owner_computes_reference).
    e = bench[f"BM_inproc_allreduce/2/{1 << 10}/0/min_time:0.200/manual_time"]
    raw1k = raw(peers, 2, 1 << 10)
    for label, name, extra in (
            ("handoff floor", "BM_handoff_reference", lambda r: f", mean {r['real_time']:.2f} us"),
            ("bare owner-computes", "BM_owner_computes_reference",
             lambda r: f"; raw MPI / bare = {raw1k * 1e6 / r['median_us']:.2f}x")):
        r = bench.get(f"{name}/{1 << 10}/min_time:0.200/manual_time")
        if "median_us" in e and r is not None:
            out.append(Target(f"comm: inproc 2 ranks 1K median / {label} median (context)",
                              e["median_us"] / r["median_us"], 0.0,
                              note=f"inproc median {e['median_us']:.2f} us (p10 {e['p10_us']:.2f}); {label} "
                                   f"median {r['median_us']:.2f} us (p10 {r['p10_us']:.2f}){extra(r)}"))
    # 2 ranks, 16M floats: >= 5x faster than raw MPI, >= 80% of the memory bound.
    t16 = inproc(bench, 2, 1 << 24)
    out.append(Target("comm: raw MPI / inproc, 2 ranks, 16M floats", raw(peers, 2, 1 << 24) / t16, 5.0,
                      note=f"{raw(peers, 2, 1 << 24) * 1e3:.2f} ms vs {t16 * 1e3:.2f} ms"))
    upd = bench["BM_update_reference/2/min_time:0.500/real_time"]["bytes_per_second"]
    bound = 2 * 2 * (1 << 24) * 4 / upd  # 2*N*S bytes at the in-place update bandwidth
    m16 = inproc_mean(bench, 2, 1 << 24)  # the mean here: a bandwidth bound, no outliers to hide
    out.append(Target("comm: inproc 16M floats, fraction of memory bound", bound / m16, 0.8,
                      note=f"bound {bound * 1e3:.2f} ms at {upd / 1e9:.1f} GB/s, measured {m16 * 1e3:.2f} ms (mean)"))
    # Alternatives at 16M: owner-computes against reduce-scatter + allgather.
    rsag = inproc(bench, 2, 1 << 24, 1)
    out.append(Target("comm: reduce-scatter+allgather / owner-computes, 2 ranks 16M", rsag / t16, 1.0,
                      note="kept: the faster one is the native path"))
    # 4 ranks on 2 cores: >= 2x faster than raw MPI at every size.
    for m in SIZES:
        t = inproc(bench, 4, m)
        r = raw(peers, 4, m)
        out.append(Target(f"comm: raw MPI / inproc, 4 ranks, {m} floats", r / t, 2.0,
                          note=f"{us(r)} vs {us(t)} (medians; inproc mean {us(inproc_mean(bench, 4, m))})"))
    # heterograd's mpi transport (its default, deadline-honouring path) within 10% of raw
    # MPI_Allreduce, the two interleaved call by call in one process; peers' "seconds" is the
    # median call (the slowest rank's time per call).
    for n in (2, 4):
        for m in SIZES:
            h = peer(peers, "hg_mpi", n, m, run="raw_mpi+hg_mpi")
            r = peer(peers, "raw_mpi", n, m, run="raw_mpi+hg_mpi")
            out.append(Target(f"comm: hg mpi / raw MPI, {n} ranks, {m} floats", h / r, 1.10, op="<=",
                              note=f"{us(h)} vs {us(r)} (medians, interleaved; raw alone {us(raw(peers, n, m))})"))
    # The opt-in blocking mode (timeout = no_wait_limit: MPI_Allreduce, no deadline): context.
    for n in (2, 4):
        for m in SIZES:
            try:
                b = peer(peers, "hg_mpi_blocking", n, m, run="raw_mpi+hg_mpi_blocking")
                r = peer(peers, "raw_mpi", n, m, run="raw_mpi+hg_mpi_blocking")
                out.append(Target(f"comm: hg mpi blocking mode / raw MPI (context), {n} ranks, {m} floats",
                                  b / r, 0.0, note=f"{us(b)} vs {us(r)}"))
            except KeyError:
                pass
    # Point-to-point: send/recv ping-pong between rank pairs against MPI_Send/MPI_Recv,
    # interleaved (context).
    for n in (2, 4):
        for m in SIZES:
            try:
                run = "raw_mpi_pingpong+hg_mpi_pingpong"
                h = peer(peers, "hg_mpi_pingpong", n, m, run=run)
                r = peer(peers, "raw_mpi_pingpong", n, m, run=run)
                out.append(Target(f"comm: hg mpi send/recv ping-pong / raw MPI (context), {n} ranks, {m} floats",
                                  h / r, 0.0, note=f"{us(h)} vs {us(r)} (medians, interleaved)"))
            except KeyError:
                pass
    # Solo partial allreduce, one rank 10 ms late: on-time latency < 1 ms + transfer time.
    for n, m in ((2, 1 << 16), (4, 1 << 16), (2, 1 << 20)):
        lat = bench[f"BM_inproc_partial_solo_delayed/{n}/{m}/iterations:25/manual_time"]["real_time"] * 1e-6
        limit = 1e-3 + inproc(bench, n, m)
        out.append(Target(f"comm: solo partial, 1 rank 10 ms late, {n} ranks {m} floats", lat * 1e3, limit * 1e3,
                          op="<=", unit=" ms"))
    # gloo: context only (printed as notes).
    for n in (2, 4):
        for m in SIZES:
            try:
                g = peer(peers, "gloo", n, m)
                out.append(Target(f"comm: gloo / inproc (context), {n} ranks, {m} floats", g / inproc(bench, n, m),
                                  0.0, note=f"gloo {us(g)}"))
            except KeyError:
                pass
    return out

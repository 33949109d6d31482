"""Targets of the comm suite (issue 4), from one run of hg-bench-comm and its peers.

Figures are looked up by argument (BM_inproc_allreduce/ranks:2/floats:1024/variant:0/...); a
target whose ranks, sizes or threads the run left out (hg-bench-comm --ranks/--floats/
--threads, or a 1-core machine's thread range without 2) is skipped, not failed."""
from report import Target, find, guard, need

SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 24)


def allreduce(bench, n, m, variant=0):
    return need(bench, "BM_inproc_allreduce", ranks=n, floats=m, variant=variant)


def inproc(bench, n, m, variant=0):
    """Median seconds per call (the statistic the MPI peers report; on a shared machine the
    mean is dominated by descheduled calls), or the mean where no median was recorded."""
    e = allreduce(bench, n, m, variant)
    return e["median_us"] * 1e-6 if "median_us" in e else e["real_time"] * 1e-6


def inproc_mean(bench, n, m, variant=0):
    return allreduce(bench, n, m, variant)["real_time"] * 1e-6


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
    name = "comm: inproc 2 ranks 1K floats time (median call)"
    with guard(out, name):
        t1k = inproc(bench, 2, 1 << 10)
        out.append(Target(name, t1k * 1e6, 0.5, op="<=", unit=" us",
                          note=f"mean {us(inproc_mean(bench, 2, 1 << 10))}"))
    name = "comm: raw MPI / inproc, 2 ranks, 1K floats"
    with guard(out, name):
        t1k = inproc(bench, 2, 1 << 10)
        out.append(Target(name, raw(peers, 2, 1 << 10) / t1k, 3.0,
                          note=f"{us(raw(peers, 2, 1 << 10))} vs {us(t1k)}"))
    # Context: inproc's per-call median against two bare two-thread references of this machine:
    # the handoff floor (flag + the peer's freshly written 4 KiB; BM_handoff_reference) and the
    # owner-computes protocol with flags only (BM_owner_computes_reference).
    try:
        raw1k = raw(peers, 2, 1 << 10)
    except KeyError:
        raw1k = None
    e = find(bench, "BM_inproc_allreduce", ranks=2, floats=1 << 10, variant=0)
    for label, ref, extra in (
            ("handoff floor", "BM_handoff_reference", lambda r: f", mean {r['real_time']:.2f} us"),
            ("bare owner-computes", "BM_owner_computes_reference",
             lambda r: f"; raw MPI / bare = {raw1k * 1e6 / r['median_us']:.2f}x" if raw1k else "")):
        r = find(bench, ref, floats=1 << 10)
        if e is not None and r is not None and "median_us" in e:  # context only: else no row
            out.append(Target(f"comm: inproc 2 ranks 1K median / {label} median (context)",
                              e["median_us"] / r["median_us"], 0.0,
                              note=f"inproc median {e['median_us']:.2f} us (p10 {e['p10_us']:.2f}); {label} "
                                   f"median {r['median_us']:.2f} us (p10 {r['p10_us']:.2f}){extra(r)}"))
    # 2 ranks, 16M floats: >= 5x faster than raw MPI, >= 80% of the memory bound.
    name = "comm: raw MPI / inproc, 2 ranks, 16M floats"
    with guard(out, name):
        t16 = inproc(bench, 2, 1 << 24)
        out.append(Target(name, raw(peers, 2, 1 << 24) / t16, 5.0,
                          note=f"{raw(peers, 2, 1 << 24) * 1e3:.2f} ms vs {t16 * 1e3:.2f} ms"))
    name = "comm: inproc 16M floats, fraction of memory bound"
    with guard(out, name):
        # The in-place update with 2 threads, one per rank.
        upd = need(bench, "BM_update_reference", threads=2)["bytes_per_second"]
        bound = 2 * 2 * (1 << 24) * 4 / upd  # 2*N*S bytes at the in-place update bandwidth
        m16 = inproc_mean(bench, 2, 1 << 24)  # the mean here: a bandwidth bound, no outliers to hide
        out.append(Target(name, bound / m16, 0.8,
                          note=f"bound {bound * 1e3:.2f} ms at {upd / 1e9:.1f} GB/s, measured {m16 * 1e3:.2f} ms (mean)"))
    # Alternatives at 16M: owner-computes against reduce-scatter + allgather.
    name = "comm: reduce-scatter+allgather / owner-computes, 2 ranks 16M"
    with guard(out, name):
        rsag = inproc(bench, 2, 1 << 24, 1)
        out.append(Target(name, rsag / inproc(bench, 2, 1 << 24), 1.0,
                          note="kept: the faster one is the native path"))
    # 4 ranks on 2 cores: >= 2x faster than raw MPI at every size.
    for m in SIZES:
        name = f"comm: raw MPI / inproc, 4 ranks, {m} floats"
        with guard(out, name):
            t = inproc(bench, 4, m)
            r = raw(peers, 4, m)
            out.append(Target(name, r / t, 2.0,
                              note=f"{us(r)} vs {us(t)} (medians; inproc mean {us(inproc_mean(bench, 4, m))})"))
    # heterograd's mpi transport (its default, deadline-honouring path) within 10% of raw
    # MPI_Allreduce, the two interleaved call by call in one process; peers' "seconds" is the
    # median call (the slowest rank's time per call).
    for n in (2, 4):
        for m in SIZES:
            name = f"comm: hg mpi / raw MPI, {n} ranks, {m} floats"
            with guard(out, name):
                h = peer(peers, "hg_mpi", n, m, run="raw_mpi+hg_mpi")
                r = peer(peers, "raw_mpi", n, m, run="raw_mpi+hg_mpi")
                out.append(Target(name, h / r, 1.10, op="<=",
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
        name = f"comm: solo partial, 1 rank 10 ms late, {n} ranks {m} floats"
        with guard(out, name):
            lat = need(bench, "BM_inproc_partial_solo_delayed", ranks=n, floats=m)["real_time"] * 1e-6
            limit = 1e-3 + inproc(bench, n, m)
            out.append(Target(name, lat * 1e3, limit * 1e3, op="<=", unit=" ms"))
    # gloo: context only (printed as notes).
    for n in (2, 4):
        for m in SIZES:
            e = find(bench, "BM_inproc_allreduce", ranks=n, floats=m, variant=0)
            try:
                g = peer(peers, "gloo", n, m)
            except KeyError:
                continue
            if e is not None:
                out.append(Target(f"comm: gloo / inproc (context), {n} ranks, {m} floats", g / inproc(bench, n, m),
                                  0.0, note=f"gloo {us(g)}"))
    return out

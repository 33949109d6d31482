"""Targets of the kernels suite (issue 3), computed from one run of hg-bench-kernels and of
bench/compare/kernels_peers.sh. Every kernel figure is a ratio against references measured in
the same benchmark, interleaved call by call: the median over iterations of the per-iteration
ratio (see measure() in bench/kernels_bench.cpp). GB/s in the notes are best calls.

The issue's targets are at 2 threads (BM_sgd/threads:2/...; skipped when the run's --threads
left 2 out, or on a 1-core machine); the reports and the PyTorch comparison cover every thread
count the run measured."""
from report import Target, arg_values, guard, need


def ratio(bench, name, threads, num, den):
    """(bandwidth ratio num/den, best GB/s of num, of den). With num the kernel, the ratio is
    the median of the per-iteration ratios (kernel and den timed side by side); else the ratio
    of the best calls."""
    b = need(bench, name, threads=threads)
    r = b.get(f"kernel_over_{den}") if num == "kernel" else None
    if r is None:
        r = b[f"{num}_GBps"] / b[f"{den}_GBps"]
    return r, b[f"{num}_GBps"], b[f"{den}_GBps"]


def targets(bench, peers):
    rows = []
    # Fractions of the in-place update a += s*b with 2 threads.
    for name, label, goal in (("sgd", "SGD", 0.95), ("momentum", "momentum", 0.95),
                              ("adam", "fused Adam", 0.85)):
        t = f"kernels: {label} / update bandwidth (2 threads)"
        with guard(rows, t):
            r, k, u = ratio(bench, f"BM_{name}", 2, "kernel", "update")
            rows.append(Target(t, r, goal, note=f"{k:.1f} vs {u:.1f} GB/s"))
    # The omp backend against a hand-written OpenMP loop over the same arithmetic (2 threads),
    # the cpp backend against the same loop on 1 thread.
    for name in ("sgd", "momentum", "adam"):
        t = f"kernels: {name} omp backend / OpenMP loop (2 threads)"
        with guard(rows, t):
            r, k, l = ratio(bench, f"BM_{name}", 2, "kernel", "loop")
            rows.append(Target(t, r, 0.95, note=f"{k:.1f} vs {l:.1f} GB/s"))
    for name in ("sgd", "momentum", "adam"):
        t = f"kernels: {name} cpp backend / 1-thread loop"
        with guard(rows, t):
            r, k, l = ratio(bench, f"BM_{name}_cpp", 1, "kernel", "loop")
            rows.append(Target(t, r, 0.95, note=f"{k:.1f} vs {l:.1f} GB/s"))
    # Reported: the same Adam body through thrust::for_each_n on Thrust's omp backend (the
    # kernels' own omp path is a direct `omp parallel for simd` loop; docs/optimizers.md).
    for threads in arg_values(bench, "BM_adam", "threads"):
        t = f"kernels: Adam via thrust::for_each_n / OpenMP loop ({threads} threads, report)"
        with guard(rows, t):
            r, k, l = ratio(bench, "BM_adam", threads, "thrust_for_each", "loop")
            rows.append(Target(t, r, 0.0, note=f"{k:.1f} vs {l:.1f} GB/s"))
    # Issue 22: mixed precision (bf16 params and grads, fp32 master and moments, one pass) and
    # capturable Adam (coefficients from a device prologue, read per element) against the fp32
    # kernel, the same 28 B/element each.
    t = "kernels: mixed-precision Adam (bf16) / fp32 Adam (2 threads)"
    with guard(rows, t):
        r, k, f = ratio(bench, "BM_adam_mixed", 2, "kernel", "fp32")
        rows.append(Target(t, r, 0.9, note=f"{k:.1f} vs {f:.1f} GB/s"))
    t = "kernels: capturable Adam / fp32 Adam (2 threads)"
    with guard(rows, t):
        r, k, f = ratio(bench, "BM_adam_mixed", 2, "capturable", "fp32")
        rows.append(Target(t, r, 0.9, note=f"{k:.1f} vs {f:.1f} GB/s (best calls)"))
    t = "kernels: multi-tensor Adam (200 tensors) / one buffer (2 threads)"
    with guard(rows, t):
        r, k, s = ratio(bench, "BM_multi_tensor_adam", 2, "kernel", "single")
        rows.append(Target(t, r, 0.85, note=f"{k:.1f} vs {s:.1f} GB/s"))
    # Reported, no target: the other kernels against the update and STREAM-like copy.
    for name, label in (("weighted_sum8", "weighted sum of 8"), ("l2_norm", "L2 norm")):
        t = f"kernels: {label} / update bandwidth (2 threads, report)"
        with guard(rows, t):
            refs = need(bench, "BM_references", threads=2)
            b = need(bench, f"BM_{name}", threads=2)
            rows.append(Target(t, b["kernel_over_update"], 0.0,
                               note=f"{b['kernel_GBps']:.1f} GB/s; copy {refs['copy_GBps']:.1f} GB/s; "
                                    f"hand loop {b['loop_GBps']:.1f} GB/s"))
    # Against PyTorch's own optimizer step on the same sizes and threads, timed side by side
    # in one process (bench/compare/torch_optim.py): the median over steps of the per-step
    # ratio PyTorch time / heterograd time, for PyTorch's better variant (the smaller ratio of
    # its for-loop and foreach paths), at each thread count of the suite's run.
    res = peers.get("results", {})
    if not res:
        rows.append(Target("kernels: PyTorch comparison (no peers file)", None, 1.0))
        return rows
    version = peers.get("torch_version", "?")
    for name, label, goal, layout in (("sgd", "SGD", 1.0, "one"), ("momentum", "momentum", 1.4, "one"),
                                      ("adam", "Adam", 6.0, "one"),
                                      ("adam", "Adam, 200 tensors (report)", 0.0, "multi200")):
        for threads in arg_values(bench, f"BM_{name}", "threads"):
            t = f"kernels: {label} PyTorch / heterograd time ({threads} threads)"
            keys = [f"{name}/{threads}/{layout}/{v}" for v in ("forloop", "foreach")]
            if not all(k in res for k in keys):
                rows.append(Target(t, None, goal,
                                   skipped=f"no PyTorch figure at {threads} threads in the peers file"))
                continue
            best = min((res[k] for k in keys), key=lambda r: r["torch_over_hg"])
            rows.append(Target(t, best["torch_over_hg"], goal,
                               note=f"torch {version} best {best['torch_best_ms']:.2f} ms vs "
                                    f"{best['hg_best_ms']:.2f} ms, same process"))
    return rows

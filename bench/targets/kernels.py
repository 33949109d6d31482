"""Targets of the kernels suite (issue 3), computed from one run of hg-bench-kernels and of
bench/compare/kernels_peers.sh. Every kernel figure is a ratio against references measured in
the same benchmark, interleaved call by call: the median over iterations of the per-iteration
ratio (see measure() in bench/kernels_bench.cpp). GB/s in the notes are best calls."""
from report import Target


def entry(bench, prefix):
    for name, b in bench.items():
        if name.startswith(prefix + "/"):
            return b
    raise KeyError(prefix)


def ratio(bench, prefix, num, den):
    """(bandwidth ratio num/den, best GB/s of num, of den). With num the kernel, the ratio is
    the median of the per-iteration ratios (kernel and den timed side by side); else the ratio
    of the best calls."""
    b = entry(bench, prefix)
    r = b.get(f"kernel_over_{den}") if num == "kernel" else None
    if r is None:
        r = b[f"{num}_GBps"] / b[f"{den}_GBps"]
    return r, b[f"{num}_GBps"], b[f"{den}_GBps"]


def targets(bench, peers):
    rows = []
    # Fractions of the in-place update a += s*b with 2 threads.
    for name, label, goal in (("sgd", "SGD", 0.95), ("momentum", "momentum", 0.95),
                              ("adam", "fused Adam", 0.85)):
        r, k, u = ratio(bench, f"BM_{name}/2", "kernel", "update")
        rows.append(Target(f"kernels: {label} / update bandwidth (2 threads)", r, goal,
                           note=f"{k:.1f} vs {u:.1f} GB/s"))
    # The omp backend against a hand-written OpenMP loop over the same arithmetic (2 threads),
    # the cpp backend against the same loop on 1 thread.
    for name in ("sgd", "momentum", "adam"):
        r, k, l = ratio(bench, f"BM_{name}/2", "kernel", "loop")
        rows.append(Target(f"kernels: {name} omp backend / OpenMP loop (2 threads)", r, 0.95,
                           note=f"{k:.1f} vs {l:.1f} GB/s"))
    for name in ("sgd", "momentum", "adam"):
        r, k, l = ratio(bench, f"BM_{name}_cpp/1", "kernel", "loop")
        rows.append(Target(f"kernels: {name} cpp backend / 1-thread loop", r, 0.95,
                           note=f"{k:.1f} vs {l:.1f} GB/s"))
    # Reported: the same Adam body through thrust::for_each_n on Thrust's omp backend (the
    # kernels' own omp path is a direct `omp parallel for simd` loop; docs/optimizers.md).
    for threads in (1, 2):
        r, k, l = ratio(bench, f"BM_adam/{threads}", "thrust_for_each", "loop")
        rows.append(Target(f"kernels: Adam via thrust::for_each_n / OpenMP loop ({threads} "
                           "threads, report)", r, 0.0, note=f"{k:.1f} vs {l:.1f} GB/s"))
    r, k, s = ratio(bench, "BM_multi_tensor_adam/2", "kernel", "single")
    rows.append(Target("kernels: multi-tensor Adam (200 tensors) / one buffer (2 threads)", r,
                       0.85, note=f"{k:.1f} vs {s:.1f} GB/s"))
    # Reported, no target: the other kernels against the update and STREAM-like copy.
    refs = entry(bench, "BM_references/2")
    for name, label in (("weighted_sum8", "weighted sum of 8"), ("l2_norm", "L2 norm")):
        b = entry(bench, f"BM_{name}/2")
        rows.append(Target(f"kernels: {label} / update bandwidth (2 threads, report)",
                           b["kernel_over_update"], 0.0,
                           note=f"{b['kernel_GBps']:.1f} GB/s; copy {refs['copy_GBps']:.1f} GB/s; "
                                f"hand loop {b['loop_GBps']:.1f} GB/s"))
    # Against PyTorch's own optimizer step on the same sizes and threads, timed side by side
    # in one process (bench/compare/torch_optim.py): the median over steps of the per-step
    # ratio PyTorch time / heterograd time, for PyTorch's better variant (the smaller ratio of
    # its for-loop and foreach paths).
    res = peers.get("results", {})
    if not res:
        rows.append(Target("kernels: PyTorch comparison (no peers file)", None, 1.0))
        return rows
    version = peers.get("torch_version", "?")
    for name, label, goal, layout in (("sgd", "SGD", 1.0, "one"), ("momentum", "momentum", 1.4, "one"),
                                      ("adam", "Adam", 6.0, "one"),
                                      ("adam", "Adam, 200 tensors (report)", 0.0, "multi200")):
        for threads in (1, 2):
            runs = [res[f"{name}/{threads}/{layout}/{v}"] for v in ("forloop", "foreach")]
            best = min(runs, key=lambda r: r["torch_over_hg"])
            rows.append(Target(f"kernels: {label} PyTorch / heterograd time ({threads} threads)",
                               best["torch_over_hg"], goal,
                               note=f"torch {version} best {best['torch_best_ms']:.2f} ms vs "
                                    f"{best['hg_best_ms']:.2f} ms, same process"))
    return rows

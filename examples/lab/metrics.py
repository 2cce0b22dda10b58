"""What a reader sees for a record's identifiers: a metric's words, a case key's words, size keys.

A record names its figures by identifier (``ms_per_token``, ``speed_of_light_fraction``)
and its cases by key (``bytes``, ``recipe``); pages name them the same way in their
shortcodes. A reader should see neither: every table header, hover text and Appendix A
row says a metric in the words below, and its unit comes from the record, never from
here (``time per token (ms)``).

This module is presentation, and it is *bookkeeping* (``BOOKKEEPING`` in
:mod:`examples.lab.provenance`): no example and no harness module imports it, so
rewording a label does not stale a single measurement, which is why the words live
here and not beside the ``lab.time`` calls in the examples. ``tests/test_metric_labels.py``
fails when a metric of a committed record, or one that a page's shortcode names, has no
label, or a case key is neither given words nor declared a word: a new metric lands with
its words.

- :data:`METRICS`: an identifier's words wherever it appears;
- :data:`TOPIC_METRICS`: per topic, where one identifier means different things in
  different topics (``time`` of a whole decode step, ``step`` of a DDP iteration);
- :data:`CASE_KEYS` (and :data:`TOPIC_CASE_KEYS`): a case key's words where the key is
  not already a word a reader would use (``d`` -> ``model width d``), :data:`WORD_KEYS`
  the keys that are;
- :data:`CASE_VALUES`: a case value's words, where the value is an identifier of the code
  (``all_gather`` -> ``all-gather``, ``dist.all_reduce`` -> ``NCCL all-reduce``): tables,
  fold titles, hover text and every plot's legend say the words;
- :data:`SIZE_KEYS`: case keys whose values are sizes in memory, with the unit they are
  recorded in: tables print them in binary units (``262144`` bytes -> ``256 KiB``).
  Declared, never guessed from a value's magnitude: ``n = 67108864`` is not a size;
- :data:`COUNT_KEYS` (and :data:`TOPIC_COUNT_KEYS`): case keys whose values count elements,
  which tables print with a binary prefix from 10,000 up (``1048576`` elements -> ``1 Mi``).
  Any other large whole number (a matrix side, a width, a token count: ``16,384``) prints
  whole with separators, as a reader writes it and as the prose does (``16384³``).
"""
from __future__ import annotations

#: Metric identifier -> words, in every topic unless :data:`TOPIC_METRICS` says otherwise.
METRICS: dict[str, str] = {
    "accumulation_error": "error against its operands' exact product",
    "correlation": "correlation of two series",
    "lag1": "correlation with the next round",
    "lag1_ratio": "paired ratio's correlation with the next round's",
    "achieved_occupancy": "achieved occupancy",
    "algbw": "algorithm bandwidth",
    "allocation_share": "share spent allocating",
    "wrong_share": "share of the output wrong",
    "allocated": "memory allocated",
    "alpha": "latency term α",
    "alpha_bound": "upper bound on α (per step)",
    "api_calls": "CUDA API calls",
    "arithmetic_error": "arithmetic error",
    "aten_ops": "ATen operations",
    "aten_ops_per_layer": "ATen operations per layer",
    "bandwidth": "bandwidth",
    "bare_launch_over_layer": "bare launch over this layer",
    "best_read_over_copy": "best read over copy",
    "block_sparsity": "tiles skipped",
    "break_even_calls": "calls to repay compiling",
    "bucket_duration": "bucket's all-reduce",
    "bucket_vs_alone": "bucket over alone",
    "buckets": "buckets",
    "busbw": "bus bandwidth",
    "busy_fraction": "GPU busy fraction",
    "channels": "NCCL channels",
    "clock_of_top": "clock over the top clock",
    "comm_cost": "communication cost",
    "comm_share_of_gap": "collectives alone over the gap",
    "compile": "compile time",
    "compile_time": "compile time",
    "compiled_kernel_time": "compiled kernel time",
    "compiled_kernels": "compiled kernels",
    "compiled_one_call": "compiled, one call",
    "computed_rate": "rate over the entries computed",
    "copy_bandwidth": "copy bandwidth",
    "copy_kernel_time": "copy kernel time",
    "d2h_copies": "device-to-host copies",
    "dram_bandwidth": "DRAM bandwidth",
    "dram_read": "DRAM read",
    "dram_throughput": "DRAM throughput",
    "dropped_fraction": "fraction dropped",
    "duration": "duration",
    "eager_bytes": "eager traffic",
    "eager_kernel_time": "eager kernel time",
    "eager_kernels": "eager kernels",
    "end_mismatch": "end mismatch between ranks",
    "error_grad_w": "weight-gradient error",
    "error_grad_x": "input-gradient error",
    "error_out": "output error",
    "error_vs_fp32": "error against FP32",
    "expected_allocated": "expected allocated",
    "expected_reserved": "expected reserved",
    "exposed_comm": "exposed communication",
    "fft_speedup": "FFT speed-up",
    "first_bucket_start": "first bucket starts",
    "first_call": "first call",
    "first_kernel": "first kernel starts",
    "first_kernel_delay": "first kernel's delay",
    "fit_alpha": "fitted cost per step α",
    "fit_beta": "fitted fixed cost per call β",
    "fraction_of_read_roof": "fraction of the read roof",
    "fraction_of_copy": "fraction of copy bandwidth",
    "fraction_of_library": "fraction of the library's rate",
    "kernels_per_step": "kernels per step",
    "saved_bytes": "memory saved for backward",
    "saved_tensors": "tensors saved for backward",
    "speedup_of_cache": "speed-up of the warm cache",
    "speedup_over_foreach": "speed-up over foreach",
    "step_peak": "peak memory of a step",
    "step_time": "step time",
    "vs_wgmma": "rate as a fraction of Triton wgmma's",
    "fraction_of_separate": "fraction of separate pools",
    "fraction_one_call": "fraction, one call",
    "fused_bandwidth": "fused bandwidth",
    "fused_bytes": "fused traffic",
    "gb_per_token": "bytes read per token",
    "gemm_alone": "GEMM alone",
    "gemm_kernel_time": "GEMM kernel time",
    "gemm_overlapped": "GEMM beside communication",
    "gemm_rate": "GEMM rate",
    "generate": "generation time",
    "gpu_busy": "GPU busy",
    "gpu_gaps": "GPU idle gaps",
    "graph_breaks": "graph breaks",
    "graph_pool": "graph memory pool",
    "graphed_small": "graphed, smallest size",
    "grid_size": "grid size",
    "hidden": "hidden behind compute",
    "idle_over_back_to_back": "one from idle over back to back",
    "host_issue": "host issue time",
    "host_waits_per_step": "host waits per step",
    "in_launch": "time in launch calls",
    "in_sync": "time in synchronize",
    "intensity": "arithmetic intensity",
    "kernel": "kernel time",
    "kernel_bandwidth": "bandwidth from kernel time",
    "kernel_in_code": "kernel in generated code",
    "kernel_speedup": "kernel speed-up",
    "kernel_time": "kernel time",
    "kernels": "kernels",
    "kernels_per_call": "kernels per call",
    "kernels_per_layer": "kernels per layer",
    "kernels_per_token": "kernels per token",
    "largest_bucket": "largest bucket",
    "last_bucket_start": "last bucket starts",
    "latency": "latency",
    "launch_calls": "launch calls",
    "logit_error": "logit error",
    "loop": "loop time",
    "mask_memory": "memory the mask keeps",
    "mask_time": "time to build the mask",
    "masks_differ": "fraction of the mask redrawn",
    "mean_kernel": "mean kernel",
    "memory_saved": "memory saved",
    "measured_over_model": "measured over model",
    "memcpy_calls": "memcpy calls",
    "memory_reserved": "memory reserved",
    "model_ratio": "measured over model",
    "ms_per_step": "time per step",
    "ms_per_token": "time per token",
    "of_roof": "fraction of the roof",
    "one_call": "one call",
    "one_call_bandwidth": "bandwidth from one call",
    "one_call_speedup": "speed-up, one call",
    "one_call_vs_kernel": "one call over kernel",
    "over_copy": "over copy",
    "over_ideal": "over ideal scaling",
    "overlap": "overlap",
    "peak_memory": "peak memory",
    "peer_later": "peer starts later",
    "peer_ready_later": "peer ready later",
    "per_call": "time per call",
    "per_iteration": "time per iteration",
    "per_kernel": "time per kernel",
    "per_op": "time per operation",
    "per_signal": "time per signal",
    "per_tiny_op": "in tiny GPU ops",
    "predicted": "predicted",
    "predicted_speedup": "predicted speed-up",
    "rate": "rate",
    "read_roof": "read roof",
    "read_roof_fraction": "fraction of the read roof",
    "registers_per_thread": "registers per thread",
    "relative_error": "relative error",
    "returned": "value returned by default",
    "returned_vs_kernel": "returned value over kernel time",
    "released": "reserved after the graph is freed",
    "replay": "time per replay",
    "reserved": "memory reserved",
    "rate_over_narrowest": "rate over the narrowest width's",
    "ridge": "ridge point",
    "run": "run time",
    "slow_samples": "samples over 1.25× the fastest",
    "slowdown": "slowdown",
    "sm_clock": "SM clock",
    "span": "span",
    "span_vs_step": "span over step",
    "speed_of_light_fraction": "fraction of the speed of light",
    "speedup": "speed-up",
    "speedup_over_best_bf16": "speed-up over the best BF16",
    "speedup_over_bf16": "speed-up over BF16",
    "speedup_over_eager": "speed-up over eager",
    "speedup_over_no_pdl": "speed-up over no PDL",
    "speedup_of_padding": "speed-up of padding",
    "speedup_vs_bf16": "speed-up over dense BF16",
    "speedup_vs_fp32": "speed-up over FP32",
    "speedup_vs_tf32": "speed-up over dense TF32",
    "split_over_step": "profiled span over step",
    "start": "start",
    "step": "step time",
    "stream_syncs": "stream synchronizations",
    "tiles": "tiles",
    "time": "time",
    "time_one_call": "time, one call",
    "tokens_per_s": "throughput",
    "top1_agreement": "top-1 agreement",
    "top_clock": "top clock",
    "tp_decode_allreduce": "decode all-reduce",
    "tracing_cost": "tracing cost",
    "transfer": "transfer",
    "transfer_vs_alone": "transfer over alone",
    "untraced": "untraced step",
    "useful_fraction": "share of entries the mask keeps",
    "useful_share": "useful share of the bytes fetched",
    "vs_caching": "over caching",
    "vs_default": "over default",
    "vs_graphed": "over graphed",
    "vs_hbm": "over HBM",
    "vs_kernel": "over kernel time",
    "vs_prediction": "over prediction",
    "vs_smallest": "over smallest",
    "vs_none": "speed-up over no workspace",
    "warmup_and_capture": "warm-up and capture",
    "waves": "waves",
    "weights_per_gpu": "weights per GPU",
    "error_vs_fp64": "error against float64",
    "error_ordinary_tokens": "error of the ordinary tokens' rows",
    "round_trip_error": "round-trip error of the ordinary values",
}

#: Per topic, where an identifier means something narrower than :data:`METRICS` says.
TOPIC_METRICS: dict[str, dict[str, str]] = {
    "blas.alignment": {"time": "kernel time", "speedup": "speed-up of the transposed read"},
    "blas.workspace": {"time": "kernel time"},
    "ecosystem.fp8_blockwise": {"time": "kernel time", "speedup": "speed-up over BF16",
                                "sweep_time": "kernel time"},
    "capstone.decode": {"time": "prefill time", "rate": "compute rate"},
    "capstone.fused_decode": {"time": "time per call", "speedup": "speed-up over cuBLAS",
                              "fraction_of_copy": "fraction of copy bandwidth"},
    "capstone.tensor_parallel": {"time": "all-reduce time", "predicted": "predicted all-reduce",
                                 "speedup": "speed-up over 1 GPU"},
    "collectives.ddp_overlap": {"step": "step time", "start": "starts at", "duration": "all-reduce time",
                                "hidden": "hidden behind backward", "vs_default": "over default buckets"},
    "collectives.ddp_host": {"step": "GPU step time", "host": "host time to backward()'s return",
                             "host_share": "host time over GPU time", "hook": "Python hook's host time per bucket",
                             "free_step": "step time, ten back to back",
                             "buckets": "buckets"},
    "collectives.ddp_levers": {"step": "step time", "vs_plain": "over plain DDP", "buckets": "all-reduce calls",
                               "all_reduced": "bytes all-reduced per step", "grad_error": "gradient error against plain DDP",
                               "peak_memory": "peak memory of a step", "held_memory": "memory held between steps",
                               "memory_saved": "peak memory saved", "expected_saving": "one gradient's size"},
    "collectives.ddp_probe": {"start": "starts at", "duration": "all-reduce time", "step": "step time",
                              "time": "all-reduce time", "vs_default": "over default setting",
                              "transfer": "transfer time"},
    "collectives.ring_allreduce": {"speedup": "speed-up over hand ring", "time": "time"},
    "dispatch.dispatch_table": {"slowdown": "time over torch.add's"},
    "dispatch.allocator_internals": {
        "block": "block handed out", "padding": "bytes past the request", "segment": "segment it was cut from",
        "block_vs_rule": "block over the rule's", "segment_vs_rule": "segment over the rule's",
        "idle": "reserved, not allocated", "segments": "segments",
        "new_memory_events": "memory got from CUDA (cudaMalloc or mapping)",
        "reused": "next allocation got the freed block", "new_segments": "new segments (cudaMalloc)",
        "wrong_share": "side stream's output wrong", "awaiting_free": "blocks awaiting another stream",
        "side_busy": "side stream still busy at the new allocation",
        "reused_after_sync": "block reused once the stream finished"},
    "compile.training": {"speedup": "speed-up over eager", "compile": "compile time (first call)",
                         "rate": "useful rate (the products' FLOPs)",
                         "bandwidth": "one pass's bytes over the kernel time",
                         "kernel_speedup_over_foreach": "speed-up over foreach (kernel time)",
                         "paired_step_time": "step time (fused and compiled alone)",
                         "speedup_over_compiled": "speed-up over the compiled step"},
    "compile.fusion_limits": {"generated_kernels": "kernels Inductor generated (launched per call)",
                              "library_calls": "library calls (cuBLAS)", "gpu_operations": "GPU operations per call",
                              "compile_time": "compile time (first call)", "speedup": "speed-up over eager (kernel time)"},
    "compile.fusion_blockers": {"graphs": "graphs Dynamo handed Inductor",
                                "generated_kernels": "kernels Inductor generated (launched per call)",
                                "fallback_calls": "operators run as they are", "gpu_operations": "GPU operations per call",
                                "time": "kernel time",
                                "compile_time": "compile time (first call)", "speedup": "speed-up over eager (kernel time)"},
    "graphs.graph_costs": {"time": "time of the stage", "step": "training step time",
                           "per_kernel": "time per kernel"},
    "dispatch.sync_points": {"kernels": "kernels launched", "loop": "loop time"},
    "ecosystem.sparse_search": {"time": "kernel time", "speedup": "speed-up over dense bf16",
                                "kept_share": "entries kept by 2:4 pruning",
                                "search_time": "one search (wall clock)", "algorithms": "algorithm ids",
                                "picked": "id the search picked",
                                "best_over_default": "fastest id over id 0",
                                "pick_over_default": "search's pick over id 0",
                                "pick_over_best": "search's pick over the fastest timed id",
                                "slowest_over_fastest": "slowest id over fastest"},
    "ecosystem.flex_attention": {"time": "kernel time", "rate": "rate of useful work",
                                 "speedup": "speed-up over SDPA with the dense mask",
                                 "compile_time": "first call (compile)",
                                 "peak_memory": "memory one call allocates"},
    "measuring.cpu_bound_trap": {"time": "time measured", "vs_kernel": "over kernel time"},
    "measuring.ncu_capture": {"duration": "kernel duration", "kernels": "kernels profiled"},
    "measuring.ncu_sections": {"duration": "duration under ncu", "book_time": "the book's kernel time",
                               "ncu_over_book": "ncu's over the book's", "sm_clock": "SM clock under ncu",
                               "compute_throughput": "compute (SM) throughput", "dram_write": "DRAM written",
                               "l1_hit_rate": "L1 hit rate", "l2_hit_rate": "L2 hit rate",
                               "sectors_per_request": "sectors per load request",
                               "cycles_per_issue": "warp cycles per issued instruction",
                               "share_coalesced": "coalesced read", "share_strided": "stride-8 read",
                               "share_gemm": "GEMM"},
    "measuring.timers": {"time": "time per call", "vs_kernel": "median over kernel time",
                         "returned": "default return (mean)"},
    "measuring.warm_cache_trap": {"kernel": "kernel time", "one_call": "one call"},
    "measuring.ratio_ci": {"time": "kernel time", "correlation": "correlation of the two variants' samples",
                           "paired_ratio": "paired ratio, K 8448 over 8192",
                           "ratio_of_medians": "ratio of medians, K 8448 over 8192",
                           "ci_low": "95 % interval, low end", "ci_high": "95 % interval, high end",
                           "ci_width": "interval's width over the ratio",
                           "width_over_first": "width over its width at 10 rounds",
                           "paired_over_unpaired": "width, rounds resampled, over each variant resampled",
                           "median_of_ratios_over_unpaired": "width, median of paired ratios, over each variant resampled",
                           "interval_over_iqr": "width, median of paired ratios, over their IQR",
                           "lag1": "one round's time against the next's (correlation)",
                           "lag1_ratio": "one round's paired ratio against the next's (correlation)",
                           "window_coverage": "windows whose interval held the run's estimate"},
    "stack.memory_access": {"time": "kernel time", "bandwidth": "useful bandwidth",
                            "predicted": "predicted useful bandwidth",
                            "vs_prediction": "measured over predicted"},
    "stack.banks_and_pages": {"time": "kernel time", "speedup": "speed-up over the plain tile",
                              "bandwidth": "bandwidth (read + written)", "of_copy": "of the copy's bandwidth",
                              "conflict_ways": "passes per warp access (index maths)",
                              "latency": "time per dependent read",
                              "conflicts_load": "bank conflicts, shared loads (ncu)",
                              "conflicts_store": "bank conflicts, shared stores (ncu)",
                              "wavefronts_load": "shared-load wavefronts (ncu)",
                              "instructions_load": "shared-load instructions (ncu)"},
    "stack.roofline": {"kernel": "kernel time", "rate": "compute rate"},
    "stack.matmul_kernel": {"time": "matmul time"},
    "stack.gemm_worklog": {"time": "kernel time", "rate": "rate", "fraction_of_cublas": "fraction of cuBLAS's rate",
                           "global_loads_per_fma": "device-memory loads per multiply-add",
                           "shared_loads_per_fma": "shared-memory loads per multiply-add",
                           "over_previous": "speed-up over the step before"},
}

#: Metrics that are a *difference* (or estimated by one), so either sign is a true reading: the
#: record validator (``examples.lab.records.check_figure``) lets them be negative, and a
#: percentage of them pass 100 (a change, not a share). Every other metric of a unit that
#: cannot be negative (a duration, a size, a rate, a count, a ratio, a percentage) is refused
#: below zero.
SIGNED_METRICS: dict[str, str] = {
    "memory_saved": "plain DDP's peak less the variant's: below zero if a variant ever held more",
    "peer_later": "how much later the other rank started the same all-reduce: negative when it started first",
    "peer_ready_later": "how much later the other rank's bucket was ready: negative when it was ready first",
    "tracing_cost": "traced over untraced step, less one (in %): the noise of a cheap trace makes it negative",
    "over_ideal": "the split step less one GPU's over the GPUs: negative where splitting scales better than that",
    "transfer": "the all-reduce kernel's duration less its wait for the peer, whose start is on another clock",
    "first_kernel_delay": "the first kernel's start (profiler clock) less the step's mark (wall clock)",
    "fit_alpha": "a least-squares slope: noise can put it below zero",
    "fit_beta": "a least-squares intercept: noise can put it below zero",
    # A share, but estimated as 1 - 1/speed-up: where noise puts the speed-up below 1, below zero.
    "allocation_share": "1 - 1/(new tensor over out=): negative when noise makes out= the slower",
    "correlation": "Pearson's correlation of two variants' samples: -1 to 1",
    "lag1": "a series' correlation with itself one round later: -1 to 1",
    "lag1_ratio": "a series' correlation with itself one round later: -1 to 1",
}

#: Metrics that are a part of a whole: in [0, 1] when unitless, in [0, 100] when in %. Every
#: other ``%`` metric is one too (the validator treats ``%`` as a share unless it is signed);
#: unitless ones are named here, since most unitless figures (counts, errors) have no top.
#: ``speed_of_light_fraction`` and the ``fraction_of_*`` figures are ratios to a measured
#: reference, which a run can beat, so they are not shares.
SHARES: frozenset[str] = frozenset({
    "allocation_share", "busy_fraction", "top1_agreement", "useful_share",
    "wrong_share",  # dispatch.allocator_internals: the share of elements a racing stream read wrong
    "kernel_in_code",  # 1 or 0 per run (the name in Inductor's code or not); a median may be 0.5
})

#: Per topic, metrics that look like a share but are a ratio of two separate measurements (a
#: profiled step's kernel time over an unprofiled step's time), so above the whole is a true
#: reading: the validator does not cap them at 100 % (or 1). metric -> why.
TOPIC_RATIOS: dict[str, dict[str, str]] = {
    # The topic's older records divided five profiled steps' kernel time by the median of
    # separate, unprofiled steps: two timings, so a few per cent above one (one H200 record:
    # 106.6 %). Its current code divides each profiled window's busy time by that window's
    # own wall time, which cannot pass 100 %; the older records still load.
    "measuring.profile_mix": {"busy_fraction": "in the older records, a profiled step's kernel time over "
                                               "an unprofiled step's time"},
    # An interval's width over the ratio it bounds: past 100 % where the rounds disagree
    # widely, as a quick run on a busy CPU's can (one: 11,050 %).
    "measuring.ratio_ci": {"ci_width": "an interval's width over the ratio it bounds"},
}

#: Case key -> words, where the key is not already the word a reader would use.
CASE_KEYS: dict[str, str] = {
    "MiB": "working set",
    "stall": "warp state (share of its cycles)",
    "algo": "NCCL algorithm/protocol",
    "nccl": "NCCL setting",
    "all_reduce": "all-reduce",
    "accumulation": "FP8 accumulation",
    "bytes": "message size",
    "cudnn_tf32": "cuDNN TF32",
    "d": "model width d",
    "dtype": "data type",
    "fft": "FFT batching",
    "gpus": "GPUs",
    "grad_mode": "grad mode",
    "h": "hidden width h",
    "head_dim": "head dimension",
    "impl": "implementation",
    "k": "size k",
    "n": "size n",
    "op": "operation",
    "p": "dropout probability p",
    "seq": "sequence length",
    "size": "size",
    "sync": "synchronizing call",
    "hidden": "hidden size",
    "intensity": "intensity (FLOP/B)",
}

#: Case keys that are already the word a reader would use; with :data:`CASE_KEYS`, every key
#: a record uses (a test checks), so a new key is a decision: a word as it is, or words for it.
WORD_KEYS = frozenset({
    "allocator", "backend", "band", "batch", "bucket", "collective", "device", "elements", "filter", "format",
    "graphs", "inputs", "kernel", "kernels", "layer", "layers", "layout", "length", "level", "mask", "method",
    "mistake", "mode", "outputs", "pair", "part", "pattern", "phase", "pool", "pools", "precision", "product",
    "profiler", "provider", "rank", "recipe", "registration", "replays", "request", "rung", "setting", "shape",
    "signals", "sparsity", "stage", "step", "timer", "timing", "tokens", "trace", "variant", "vocabulary", "way",
    "width", "workload", "workspace",
})

#: Per topic, where a case key means something narrower than :data:`CASE_KEYS` says.
TOPIC_CASE_KEYS: dict[str, dict[str, str]] = {
    "compile.triton_kernels": {"size": "size (elements; matmul: side)"},
    "measuring.cpu_bound_trap": {"n": "elements n"},
    "measuring.ratio_ci": {"rounds": "first rounds", "interval": "interval"},
    "ecosystem.triton_op": {"size": "elements"},
    "ecosystem.fft_conv": {"length": "signal length", "filter": "filter length"},
    "collectives.ddp_overlap": {"all_reduce": "all-reduce"},
    "collectives.ddp_probe": {"bytes": "bucket size"},
    "blas.alignment": {"m": "rows m", "n": "output width n"},
    "compile.training": {"width": "model width", "tensors": "parameter tensors", "cache": "on-disk caches"},
    "stack.banks_and_pages": {"n": "matrix side n", "MiB": "footprint", "pages": "2 MiB regions touched",
                              "layout": "tile layout"},
    "stack.memory_access": {"stride": "stride (words)", "bytes_used": "bytes used per read",
                            "unit_bytes": "random unit"},
}

#: Case key -> {value: words}, where a value is an identifier of the code rather than a word a
#: reader would use. The shortcodes still filter on the value as recorded (``collective=all_gather``);
#: a reader sees the words, in a table's cells, a fold's title, a value's hover and a plot's legend.
#: A page's ``legend=`` overrides them for one plot. ``tests/test_figures.py`` fails on a legend or
#: an axis of the built book that shows an identifier, so a new value of a plotted key lands with
#: its words here.
CASE_VALUES: dict[str, dict[str, str]] = {
    "collective": {"all_gather": "all-gather", "all_reduce": "all-reduce", "all_to_all": "all-to-all",
                   "reduce_scatter": "reduce-scatter"},
    "impl": {"dist.all_reduce": "NCCL all-reduce"},
    "part": {"all_reduce": "all-reduce", "nccl_model": "NCCL's cost model"},
}

#: Case keys whose values are sizes in memory -> the unit the records give them in.
SIZE_KEYS: dict[str, str] = {"bytes": "B", "MiB": "MiB", "bytes_used": "B", "unit_bytes": "B"}

#: Case keys whose values count elements (of a tensor, a buffer): printed with a binary prefix
#: from 10,000 up (``64 Mi``). Per topic where a key that elsewhere is a matrix side counts
#: elements (``n`` of measuring.cpu_bound_trap).
COUNT_KEYS = frozenset({"elements"})
TOPIC_COUNT_KEYS: dict[str, frozenset[str]] = {
    "measuring.cpu_bound_trap": frozenset({"n"}),
    "compile.triton_kernels": frozenset({"size"}),  # elements (a matmul's side stays under 10,000)
}


class UnknownLabel(KeyError):
    """An identifier without words here: add it to :data:`METRICS` (or :data:`CASE_KEYS`)."""

    def __str__(self) -> str:  # KeyError's own str() quotes its argument
        return self.args[0]


def metric_label(topic: str, name: str) -> str:
    """The words for metric ``name`` of ``topic``; :class:`UnknownLabel` if it has none."""
    words = TOPIC_METRICS.get(topic, {}).get(name) or METRICS.get(name)
    if words is None:
        raise UnknownLabel(f"metric {name!r} of topic {topic} has no label: add its words to METRICS "
                           "in examples/lab/metrics.py")
    return words


def key_label(topic: str, key: str) -> str:
    """The words for case key ``key`` of ``topic``: its entry, else the key itself (already a word)."""
    return TOPIC_CASE_KEYS.get(topic, {}).get(key) or CASE_KEYS.get(key) or key


def value_label(key: str, value) -> str | None:
    """The words for case value ``value`` of key ``key`` (``'all-gather'``), or ``None`` where the
    value is read as it is."""
    return CASE_VALUES.get(key, {}).get(value) if isinstance(value, str) else None


def is_count(topic: str | None, key: str) -> bool:
    """Whether ``key``'s values (in ``topic``'s records, where known) count elements."""
    return key in COUNT_KEYS or key in TOPIC_COUNT_KEYS.get(topic or "", ())


def size_unit(key: str) -> str | None:
    """The unit a size key's values are recorded in (``'B'``, ``'MiB'``), or ``None``."""
    return SIZE_KEYS.get(key)


def identifiers() -> set[str]:
    """Every identifier this module gives words to, metrics and case keys."""
    return {*METRICS, *CASE_KEYS, *(n for m in TOPIC_METRICS.values() for n in m),
            *(k for m in TOPIC_CASE_KEYS.values() for k in m)}


def labels_of(name: str) -> set[str]:
    """Every label ``name`` has, as a metric or a case key, in any topic."""
    found = {METRICS.get(name), CASE_KEYS.get(name)}
    found |= {m.get(name) for m in (*TOPIC_METRICS.values(), *TOPIC_CASE_KEYS.values())}
    return {w for w in found if w}


def not_words() -> set[str]:
    """Identifiers a reader should never see as a header: those that no label of theirs uses as a
    word (``algbw``, ``gpus``, ``ms_per_token``); ``rate`` (``compute rate``) and ``run``
    (``run time``) are words, so a header may say them."""
    return {name for name in identifiers()
            if not any(name in words.split(" ") for words in labels_of(name))}

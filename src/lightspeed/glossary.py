"""What every label, column and title of lightspeed's reports means, as this code
computes it: `lightspeed explain TERM` shows one entry, and `docs/glossary.md` is
`markdown()` written out (a test keeps the two equal).

The entries are written below as a glossary reads: a line `term | alias | alias`, the
definition indented under it (plain text), a blank line between entries; lines starting
with `#` group them. A term is found by its `key`, so a label is found as a report
prints it: case, punctuation, "%", numbers, details in parentheses and whatever follows
a colon or a semicolon do not count ("Top 10 ops by headroom: where to look first" is
"top ops by headroom", "Memory (tracked-storages)" is "memory"); failing that, a plural
finds its singular and back. No two entries may share a key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re


@dataclasses.dataclass(frozen=True)
class Entry:
    """One glossary term, the other names it goes by, and what it means (plain text)."""

    term: str
    definition: str
    aliases: tuple[str, ...] = ()


_TEXT = """
# The roofline and the speed of light.
speed of light | SoL | speed-of-light | SoL time
    The least time work could take on the hardware, in seconds: for each op max(FLOPs / peak
    FLOP/s, bytes / bandwidth), summed over the step's ops (or a phase's, a module's); on a
    calibrated device, an op whose bytes fit in the last-level cache has the cache bandwidth. It
    assumes each op's math and memory traffic overlap perfectly and nothing runs between ops.
    The speed-of-light finding says the step is at most 1 / (of speed of light) times faster
    with perfect kernels and no overhead.

of speed of light | of SoL | fraction of speed of light | efficiency
    Speed-of-light time over measured time, as a percentage: 100% is the hardware's limit. For
    the step, its ops' summed SoL over the median step time of the timing run; for a phase,
    module or op, its SoL over its measured op time from the profiled run.

achieved FLOP/s | achieved
    The step's FLOPs over its median step time, printed beside of speed of light; a trace's
    matmuls line gives the same for its matrix products (their FLOPs over their kernels' time).

headroom
    An op's measured time minus its speed-of-light time, in seconds: the most a perfect kernel
    could save on it.

top ops by headroom
    The --top (default 10) measured op calls with the most headroom, each call on its own line:
    where faster kernels could save the most. Calls alike in op, module and phase are told apart
    by #n, their order in the step.

roofline
    The model of a device as two roofs: work of arithmetic intensity I can run at most at
    min(peak FLOP/s, I × bandwidth). lightspeed roofline places one amount of work (--flops,
    --bytes) under the ceilings of --hardware and --dtype, or of --peak-flops and --bandwidth.

arithmetic intensity | intensity | FLOP/B
    FLOPs per byte moved (FLOP/B): the work's FLOPs over the bytes it reads and writes, infinite
    when it moves none. At or above the ridge point work is compute-bound, below it
    memory-bound.

ridge point
    Peak FLOP/s over bandwidth, in FLOP per byte: the arithmetic intensity at which the compute
    roof and the memory roof meet. hw show gives it for each precision against the memory
    bandwidth.

ceilings
    The two roofs work is placed under: the peak FLOP/s of its precision and the bandwidth its
    bytes come from.

attainable | attainable FLOP/s
    min(peak FLOP/s, intensity × bandwidth): the highest rate, in FLOP/s, the roofline allows
    work of this arithmetic intensity.

MFU | MFU / HFU | model FLOPs utilization
    Model FLOPs utilization: the FLOPs of the ops run in the forward and backward phases over
    (median step time × peak FLOP/s), the peak of the step's precision (fp32 when the hardware
    lists none for it). Printed as MFU / HFU, beside HFU and the peak they are taken against.

HFU | hardware FLOPs utilization
    Hardware FLOPs utilization: every FLOP the step ran, the optimizer's included, over (median
    step time × peak FLOP/s) at the step's precision; at least MFU.

work
    What the work is: the step's FLOPs (every captured op's), in parentheses those of the
    forward and backward phases (MFU's numerator), and the bytes its ops move, summed over ops.
    In lightspeed roofline, the FLOPs and bytes given.

FLOPs | FLOP
    Floating-point operations, a multiply-accumulate counting 2: per-op formulas on each op's
    input shapes (torch.utils.flop_counter's, lightspeed's own where torch has none), a
    documented count per element for pointwise ops and reductions, 0 for views and copies. An op
    with no formula counts 0 (see unknown FLOPs); a trace's matrix products count 2·B·M·K·N.

bytes | bytes moved
    Bytes an op moves: each distinct storage it reads counted once and each it writes once (an
    in-place operand both), a broadcast view only the elements it reaches, a gather only the
    rows it picks, a view 0. Summed over ops, data several ops touch counts once per op; sizes
    print with binary prefixes (1 KiB = 1024 B).

unknown FLOPs | unknown-flops
    The share of measured op time in ops no FLOP formula covers, with their names: they count 0
    FLOPs, so the step's FLOPs, MFU and speed of light understate it. Above 1% of the op time it
    is also the unknown-flops finding.

above speed of light | above-speed-of-light
    A finding: ops that reached more than 125% of their speed of light, or a step above 100% of
    its own, so a ceiling is too low. On a calibrated device it names the op and the calibration
    kernel that set the roof it beat; on a datasheet device, the run was probably on other
    hardware than --hardware names.

# Bounds and findings.
bound
    What limits the work: compute, memory, cache, overhead, synchronization, communication,
    data-loading or unknown. An op's bound is its side of the ridge point (cache when that roof
    is the cache's), or overhead when it takes under 20 µs at under 50% of its speed of light. A
    step's bound is the first of data-loading, synchronization, communication and overhead that
    a finding names; when none is, memory if its memory-bound time exceeds its compute-bound
    time, else compute (unknown when nothing was recorded).

compute | computation | compute-bound | compute time
    As a bound: the math units are the limit, for an op whose arithmetic intensity is at or
    above the ridge point, or a step no other cause is named for whose compute-bound time is at
    least its memory-bound time. In device time (HTA's compute time): the time at least one
    computation kernel runs, a computation kernel being any device event whose name is not a
    communication kernel, Memcpy, Memset or a Sync.

memory | memory-bound | GiB | memory capacity
    As a bound: moving bytes is the limit, for an op below the ridge point, or a step no other
    cause is named for whose memory-bound time (in a trace, copies and sets) exceeds its
    compute-bound time. In device time and as a kernel type: memory copies and sets (names
    starting Memcpy, Memset or dma). On hardware: the device's memory capacity (GiB in the
    catalog list), and in a calibration each bandwidth kernel's rate from memory with its
    read:write ratio; the Memory table is the step's bytes by category, with its method
    (tracked-storages on a CPU, cuda-allocator on CUDA).

cache | cache-bound
    As an op's bound: memory-bound with the last-level cache as its roof, because its bytes fit
    in the cache of a calibrated device. In a calibration: each bandwidth kernel's best rate on
    working sets inside the cache, with its read:write ratio.

overhead | per-op overhead
    As a bound: fixed per-op cost rather than work: an op under 20 µs at under 50% of its speed
    of light; a step whose device idles 25% or more waiting on the host's per-op work
    (device-idle), or a CPU-only step with half or more in per-op cost (host-overhead). On the
    host line of a trace: the window's time in no top-level op of at least 20 µs, no data
    loading, no sync and no collective.

synchronization
    The bound and finding when host syncs cost 20% of the step or more (with a device: the idle
    time they drain it into, blocking copy calls and syncing on an idle device; on a CPU alone:
    the time in them), or, on a CPU alone, when the step syncs at least 10 times and at least
    once every 8 ops.

communication
    Collective communication kernels (names matching nccl…Kernel: NCCL and RCCL). The
    communication line gives their time (the union of their intervals), the share of it
    overlapped with computation kernels, and the exposed rest; in device time they count where
    no computation kernel runs. As a bound and finding: exposed communication, with the host's
    waits in collectives while the device idles, of 25% of the step or more.

data loading | data-loading | data | loading data
    Host time in DataLoader iterations (events named enumerate(DataLoader)… or
    …DataLoader…__next__), as a union, in seconds. At 25% of the step or more it is the
    data-loading bound and finding, whose advice depends on whether the DataLoader already runs
    worker processes.

unknown | nothing-to-judge
    The bound of a window in which nothing was recorded (no op and no device work, or no time):
    nothing to judge, and the nothing-to-judge finding says to record more or longer steps.

device idle | device-idle | idle breakdown
    HTA's idle breakdown of the device as a whole: each gap between its events is waiting for
    the host when the event ending it was launched after the gap began, else kernel wait
    (between back-to-back kernels) when under 30 µs, else other. The device-idle finding, which
    names the bound overhead, is 25% of the step or more of device idle on the host's per-op
    work: in a trace, the idle time (before a step's first and after its last device event
    included) the host spent in no sync, copy call, collective or data loading; in a profile on
    a GPU, the unattributed time plus the ops bound by overhead.

device busy | device-busy
    A finding on a step whose device idles less than 25% of it on the host's per-op work: faster
    kernels are the lever. It gives the busy and computing shares of the step and, for matrix
    products on a catalog GPU, their fraction of speed of light; it states no bound on the gain,
    and is left out when another cause names the bound.

host overhead | host-overhead
    A finding and the overhead bound on a step with no device: per-op cost of half the step or
    more. In a trace, time in no top-level op of at least 20 µs, no data loading, no sync and no
    collective; in a profile, the unattributed time plus the ops bound by overhead.

tensor-core shapes | tensor-core-shapes | unaligned | tensor-core eligible
    A matrix product can use tensor cores fully when its dimensions (M, K, N; in a profile, a
    convolution's channels in and out) are multiples of 8 in fp16 or bf16, 4 in tf32 and 16 in
    fp8; otherwise it is unaligned. fp32 products count as tf32 in a profile on a GPU with a
    tf32 peak, and in a trace when they ran faster than the fp32 peak allows. The
    tensor-core-shapes finding: unaligned products take 5% of the step or more; it gives an
    example padded to the multiple.

rank skew | rank-skew
    A finding: in a step, the slowest rank's step is 10% or more longer than the fastest rank's;
    the faster ranks wait for it in every collective.

collective wait | collective-wait
    A finding: in a step, a rank waits in collectives for later ranks (its summed wait) for 10%
    of its step or more; it names the ranks that most often arrived last.

max speedup | fixing it
    (fixing it: at most N× faster) after a finding: the most fixing it could speed the step up,
    by Amdahl's law: removing a part that takes a fraction f of the step makes it at most 1 / (1
    − f) times faster.

Findings
    What to look at, one line each as [kind] message: the finding that names the bound first,
    the others by the most their fix could gain.

Warnings
    Reasons not to trust the figures as they stand: few or noisy replicates, a step time still
    drifting, page faults every step, a busy machine (canary drift, steal time, load average),
    and what lightspeed logged while the command ran.

Not analysed
    What a trace analysis could not use: no GPU kernels (only the host side is analysed), no
    ProfilerStep annotations (the whole trace is one step), events that could not be read, no
    deviceProperties (GPU model unknown), or ranks missing from the comparison.

# Timing.
step time | step timing
    The median of the replicates' per-step wall times, in seconds, from the timing run (no
    profiler, no dispatch mode), with its IQR (in time, min and max too); n is the number of
    replicates, and samples/s the throughput.

median
    The middle replicate's per-step time (the mean of the two middle ones for an even count):
    the step time reported.

IQR | interquartile range
    Interquartile range of the replicates' per-step times: 75th minus 25th percentile (inclusive
    method), in seconds; 0 with fewer than 2 replicates. Above 10% of the median, a warning says
    the timing is noisy.

replicates | replicate
    n × k steps: each replicate times a block of k steps between two device syncs (k chosen so a
    block lasts at least 5 ms) and keeps the mean per step; replicates run until --budget
    seconds are spent, at least --min-replicates (5). Fewer than 4 is a warning.

warm-up | warmup
    Untimed steps before the replicates: at least --warmup (3), then blocks until the step time
    settles or 15 s pass; the count and the time they took are printed. When it settles, the
    last 3 blocks, timed as replicates are, count as the first replicates.

settled | still drifting
    Whether the warm-up ended because the step time stopped falling: the median of the 3 warm-up
    blocks before the last 3 no more than 5% slower than theirs. Still drifting means 15 s
    passed first, with a warning that a long run may step faster than measured.

throughput | samples/s | tokens/s
    Samples per second: batch size × steps timed over the total seconds timed (not 1 / median);
    tokens per second when the workload says how many tokens a sample holds.

steal time
    CPU time the hypervisor gave other guests while this one wanted it (Linux /proc/stat), as a
    share of all CPU time between just before and just after a measurement; above 5% a warning
    says neighbours slowed it.

canary
    A fixed fp32 matmul (256³ on a CPU, 4096³ on CUDA) whose FLOP/s tell whether the machine's
    speed changed: timed before and after a timing (a change over 25% is a warning) and right
    after calibrating. A cached calibration whose canary now runs more than 25% faster was taken
    on a busy machine and is measured again.

workload
    What was run: its name, batch size (samples per step), the step's precision (--dtype), the
    device, and its trainable parameter elements (shared tensors counted once).

# The profile.
unattributed | profiled step
    Of the profiled step (the step run again under torch.profiler, in seconds), the wall time no
    matched op accounts for: Python and framework overhead, the autograd engine, unmatched ops,
    and on a GPU its idle time; never below 0. The diagnosis counts it as overhead.

stopped
    The error that cut the profile short; the figures cover what was measured before it.

phase
    Which part of the training step an op ran in: forward, backward or optimizer. The Phases
    table sums each phase's ops: FLOPs, bytes, measured op time from the profiled run, SoL and
    of SoL; op times leave out what runs between ops (see unattributed).

forward
    The phase of the workload's loss(model, batch): the model's forward and the loss.

backward
    The phase of loss.backward(): the gradient ops autograd runs, each attributed to the module
    whose forward it differentiates.

optimizer
    The phase of optimizer.zero_grad() and optimizer.step(); its ops sit under the module path
    (optimizer).

module | (root)
    The path of the innermost nn.Module an op ran in, from the model root (0, encoder.layers.3);
    (root) is the root module itself, (optimizer) the optimizer's ops. The Modules tree shows
    paths --depth (2) levels deep, each with the FLOPs, measured op time and SoL of every op in
    it and its submodules; its first line, NAME (whole step), sums every op of the step, the
    optimizer's included.

op
    One aten operator call as dispatched below autograd (addmm, mm, add_; composite ops such as
    linear are seen as what they decompose into), shown without aten::.

input shapes
    The shapes of an op's inputs, × between dimensions, scalar for a 0-d tensor; shapes unknown
    when not recorded.

time | op time
    Measured time, in seconds. For ops and phases: from the profiled run, the CPU time of the op
    including the aten calls it makes (on a CPU) or the time of the GPU kernels it launched (on
    CUDA), the median over profiled steps. In a trace's Steps table: the step's length, the
    longer of its CPU span and its device span.

memory categories | category
    A storage's category is the first that applies: parameters, inputs, gradients, optimizer
    state, activations, temporaries; each storage counts once however many tensors view it.

size
    Memory table column: a category's bytes (for activations the most live at once during the
    step, for temporaries those live at the peak). In the history of bench runs: which size of
    the suite a run benched, tiny (each family's -tiny variant) or full.

live at peak
    Memory table column: each category's bytes live at the moment the step's memory peaked; they
    sum to the peak. On CUDA, what the tracked storages cannot explain (allocator rounding,
    workspaces) counts as temporaries.

peak
    In hardware tables, a precision's dense peak FLOP/s. In the Memory table, the most bytes
    live at once during the step: on a CPU, of the storages tracked allocating and freeing; on
    CUDA, the tracked bytes live at the step's start plus the caching allocator's growth over
    the step.

parameters | parameter
    Memory category: the model's parameters, each storage once (tied weights count once). The
    workload line's parameter count is the trainable parameter elements.

gradients
    Memory category: the parameters' .grad tensors after backward.

optimizer state | optimizer_state
    Memory category: every tensor in optimizer.state (for the default AdamW, two moments per
    parameter and its step counters).

activations
    Memory category: the most bytes autograd saved for backward live at once during the step,
    leaving out storages that belong to the categories before it.

temporaries
    Memory category: bytes live at the peak that belong to no other category (intermediate
    results, model buffers); on CUDA, also what the allocator holds at the peak that no tracked
    storage explains.

inputs
    Memory category: the batch's storages on the device.

training state
    (parameters + gradients + optimizer state) / parameter count, in bytes per parameter: 16 for
    fp32 parameters with AdamW (4 + 4 + 8).

# Traces.
rank
    One process of a distributed run, with a trace of its own: its number from the trace's
    distributedInfo, else a rankN in the file name, else its position. Each rank's section
    covers its whole trace, or the step --step names.

devices
    The GPUs the trace's deviceProperties name, N × name for several alike; — when none is
    named.

window
    What the figures cover, and its length: the whole trace (HTA's way: with two or more
    ProfilerSteps, the last one is left out unless --include-last-step), or step N with --step
    N. Its length is the longer of the CPU window and the device's span (first device event's
    start to last one's end).

step | ProfilerStep
    A training step; in a trace, a ProfilerStep#N annotation, whose device events are those its
    CPU side launched, cut to its span on the device timeline. The step column gives N; a trace
    without steps is one step.

Steps
    A rank's ProfilerSteps, one row each: time, busy, comm, data, syncs and bound; the title
    says whether busy and comm are the device's time or, on a trace with no device, the host's.
    Across ranks: each step two or more ranks recorded, with the slowest and fastest rank, the
    longest wait in its collectives, and who arrived last.

device time | temporal breakdown
    HTA's temporal breakdown of the device's span (first device event's start to last one's end,
    printed last): the shares in which computation, communication, memory (copies and sets) and
    other events run, each counting only time no type before it covers, and idle; they sum to
    100%.

non-compute | non-compute time
    HTA's non-compute time: the communication, memory and other shares of device time together,
    when the device runs something but no computation kernel.

idle | idle time
    Time the device runs nothing: in device time, the part of its span no kernel, copy or set
    covers; in a step, also the time before its first and after its last device event.

other
    A device event HTA types as neither computation, communication nor memory (stream sync
    records, names mentioning Sync); in device time, the time only they cover. In device idle,
    other is gaps of 30 µs or more before an event launched before the gap began: neither the
    host nor back-to-back turnaround explains them.

host wait | waiting for the host
    Device idle waiting for the host: a gap before a device event whose launch call began after
    the gap had started (HTA's rule), waiting for the host in device idle. The device-idle
    finding adds the time before a step's first and after its last device event.

kernel wait | between back-to-back kernels
    Device idle under 30 µs before an event launched before the gap began: the device's own
    turnaround between back-to-back kernels (HTA's kernel wait).

idle, the host | idle causes
    The device's idle time by what the host was doing meanwhile, each instant going to the first
    that applies: in syncs, loading data, in collectives, in copy calls (memcpy and memset
    calls, which block on pageable memory), launching kernels, in CPU ops, else in no recorded
    event (Python between ops, or unrecorded work).

overlap | overlapped
    |communication ∩ computation| / |communication|: the share of communication kernel time
    during which a computation kernel also runs (overlapped with compute).

exposed communication | exposed
    Communication kernel time with no computation kernel beside it (communication minus
    overlapped); the diagnosis adds the host's time in collectives while the device idles.

matmuls | matrix products
    The window's matrix products (aten::mm, addmm, bmm, baddbmm with recorded shapes): how many,
    their FLOPs (2·B·M·K·N), their kernels' time and FLOP/s; on a catalog GPU their summed speed
    of light over kernel time and the share of time below the ridge point (fp32 products faster
    than the fp32 peak allows are placed against tf32); and the share in shapes tensor cores
    cannot fully use.

launches
    Kernel launch calls that start in the window: how many, CPU time per launch, the median
    launch delay, and how many kernels were shorter than their launch (a launch of at most 50 µs
    whose kernel took less time than it), as HTA counts them.

launch delay | median delay
    A kernel's start minus the end of its launch call, never below 0; the median over launches
    whose kernel is in the trace.

host
    The CPU side of the window: top-level CPU ops (in no other op on their thread), data
    loading, host syncs with their time, and overhead.

syncs | sync | host syncs
    Host synchronizations: calls that block the host until the device has caught up (cuda or hip
    DeviceSynchronize, StreamSynchronize, EventSynchronize, Memcpy; aten::item,
    aten::_local_scalar_dense), counted as separate stretches of time. The syncs line: the
    host's sync time while the device was idle, and the device's idle gaps that began while the
    host waited in a sync, each counted whole.

sync calls
    The host sync calls of the window by name, with how often each ran (nested calls included).

device syncs
    The device's own sync records (Kineto's cuda_sync events) in the window, by name and count;
    they mark waiting, not work.

busy
    Steps column, in seconds: the device's busy time in the step (its span minus its idle time);
    on a trace with no device, the host's (the union of its top-level ops of at least 20 µs,
    data loading, syncs and collectives).

comm
    Steps column, in seconds: the step's device time running communication kernels and no
    computation kernel (the communication share of device time); on a trace with no device, the
    host's time in collectives.

Top kernels
    The window's 10 device event names with the most total time: HTA type, count, total and
    mean.

kernel
    A device event's name (a kernel, a memory copy or set), cut at its template arguments in a
    narrow terminal. In hw show, a calibration compute kernel.

type | kernel type
    HTA's type of a device event, by name: communication (nccl…Kernel), memory (Memcpy, Memset,
    dma…), computation (none of nccl kernels, Memcpy, Memset, Sync), else other.

count
    Top kernels column: how many device events of that name ran in the window.

total
    Top kernels column: the summed duration of that name's events, in seconds.

mean
    Top kernels column: total over count, in seconds.

Across ranks
    The ranks of a multi-rank trace compared: each step two or more ranks recorded, the
    collectives matched across ranks, and the rank-skew and collective-wait findings.

Collectives matched across ranks | collectives
    Each communication kernel name across ranks: the k-th kernel of a name in a step on one rank
    is matched with the k-th on every other (over the steps they share, else the whole traces).
    Their spread (longest − shortest duration) is the time the first rank to arrive waited for
    the last, and the rank with the shortest kernel arrived last.

matched
    Collectives column: the instances found on every rank; (+N unmatched) the ones some ranks
    have beyond that.

mean wait
    Collectives column: total wait over matched instances, in seconds.

max wait
    Collectives column: the largest spread of one matched instance. Across-ranks Steps column:
    the longest total wait of one rank in the step's collectives, with the rank.

total wait
    Collectives column: the summed spread of the matched instances, in seconds: how long the
    first rank to arrive waited for the last, in all.

slowest
    Across-ranks Steps column: the longest step time, with its rank.

fastest
    Across-ranks Steps column: the shortest step time, with its rank.

last
    Across-ranks Steps column: the ranks that arrived last at the step's collectives most often,
    as rank ×times, at most three; an instance of equal durations counts for no one.

# Hardware.
hardware
    The device whose ceilings the figures are taken against (--hardware): a catalog entry
    (datasheet numbers; lightspeed hw list), or local, this machine as calibrated. The Hardware
    section of time gives its peaks, bandwidth, memory and where they come from.

Hardware catalog | catalog
    The catalogued GPUs with their dense peak TFLOP/s per precision, memory bandwidth (GB/s) and
    memory (GiB), from cited datasheets; lightspeed hw show ID gives one with its sources.

id
    A hardware's catalog id, as --hardware takes it; local is this machine.

peak FLOP/s | peaks | dense peak
    A precision's dense peak math rate: the datasheet's (sparse figures halved) for a catalog
    device, the fastest compute kernel over a sweep of sizes for a calibrated one. Matrix
    products are placed against the peak of their inputs' precision, every other op against fp32
    (the vector units); a precision with no peak falls back to fp32.

memory bandwidth | bandwidth | GB/s | memory_bandwidth_bytes_per_s
    Bytes per second from device memory: the datasheet's, or for a calibrated device the fastest
    of seven bandwidth kernels (read, write, copy, scale, add, triad, addcdiv: read:write 1:0 to
    3:1) on arrays at least 4× the last-level cache. It is the roof of ops whose bytes do not
    fit in the cache. GB/s in the catalog list; the bandwidth line gives it, then the cache
    bandwidth.

cache bandwidth
    Bytes per second from the last-level cache, for calibrated devices only: the fastest
    bandwidth kernel on working sets from 512 KiB to half the cache. It is the roof of an op
    whose bytes fit in the cache (the size after work within).

precision | dtype
    A number format a device has a peak FLOP/s for: fp64, fp32, tf32, bf16, fp16, fp8, int8. The
    step runs in --dtype (fp32, bf16 or fp16).

fp64
    64-bit floating point (float64, double precision).

fp32
    32-bit floating point (float32): the peak of fp32 matrix products and of every op that is
    not a matrix product.

tf32
    fp32 storage multiplied on tensor cores with a 10-bit mantissa. A profile checks fp32
    products' shapes against tf32 tensor cores where the GPU has them; a trace places fp32
    products that ran faster than the fp32 peak allows against tf32.

bf16
    bfloat16: 8-bit exponent, 7-bit mantissa; catalog peaks are tensor-core rates with fp32
    accumulation.

fp16
    float16 (half precision); catalog peaks are tensor-core rates with fp32 accumulation.

fp8
    An 8-bit floating-point format, e4m3 or e5m2.

int8
    8-bit integers; a peak in int8 counts integer operations as FLOPs.

set by
    The calibration kernel that set a ceiling: a compute kernel and its size (mm-nt n=1024), or
    a bandwidth kernel and its read:write ratio (addcdiv 3:1).

SMs | sm_count | SM count
    The GPU's streaming multiprocessors: from its architecture whitepaper in the catalog, from
    the device itself when calibrated.

GPU–GPU link | GPU-GPU link | gpu_link_bytes_per_s
    The GPU interconnect's bandwidth (NVLink), both directions together, as the datasheet prints
    it.

host link | host_link_bytes_per_s
    The bandwidth of the GPU's link to the host (PCIe x16), both directions together, as the
    datasheet prints it.

Sources | source | all numbers
    Where a catalog device's numbers come from: all numbers is the citation of every figure not
    cited on a line of its own; the other lines name a field (sm_count, host_link_bytes_per_s)
    and its citation. The Hardware section's source line says datasheet, or measured here with
    when, library and threads.

calibration | calibrated
    Measuring this machine's ceilings (lightspeed hw calibrate, or the first run on --hardware
    local, the default on a CPU): the fastest compute kernel per precision sets its peak, the
    fastest bandwidth kernels the memory and cache bandwidth. It is cached per device, CPU
    flags, thread count and torch version, checked by the canary before reuse, and not cached
    when implausible (cache slower than memory, a peak or the bandwidth below half the previous
    calibration's, a canary that moved over 50%).

compute kernels
    The calibration's matrix-product kernels: mm-nn, mm-nt (Linear's forward), mm-tn (its weight
    gradient), bmm-nn, bmm-nt, conv3x3, conv3x3-cl (channels-last) and sdpa (fused attention),
    each over a sweep of sizes; the table gives each one's best FLOP/s per precision, and the
    fastest sets the peak.

best matmul
    The size n at which each precision's peak was reached: n×n×n for a square product (batched
    products, convolutions and attention are built from the same n).

library
    The math library torch's matrix products ran on (the BLAS, with oneDNN, on a CPU; cuBLAS on
    CUDA), the thread count and the torch version: a calibration holds for these.

method
    How a calibration measured: its kernels, sizes and working sets.

measured
    When a calibration finished (UTC) and how long it took, with the 1-minute load average when
    it began.

# The suite.
Built-in workloads | suite
    The workloads lightspeed ships (lightspeed suite): name one as the TARGET of time or
    profile.

name
    A built-in workload's name, as a TARGET takes it.

what it is
    A built-in workload's description.

# The bench.
Bench | lightspeed bench
    The suite's workloads (lightspeed bench NAMES or --all, at --size tiny or full), each
    profiled once and then timed in interleaved rounds: round r times every workload before
    round r + 1 times any, so a machine's drift between minutes shows as a spread between a
    workload's rounds. Its step is the median of the rounds' medians; a row's other figures come
    from the workload's profile.

rounds | round spread | between rounds
    A bench workload's slowest round median minus its fastest, over its step time: the drift
    between minutes that one timing's IQR cannot show. A change smaller than it is noise.

peak memory
    The most bytes the step held at once, from the profile's memory measurement (the memory
    breakdown's peak).

Failed
    The workloads of a bench that did not finish, each with the one-line reason; the others ran
    on.

# The results store.
Runs | run
    The bench runs the results store keeps (lightspeed history; --store PATH, default
    history.sqlite in $LIGHTSPEED_DATA_DIR or ~/.local/share/lightspeed), oldest first, each
    with its id, which lightspeed compare takes.

when
    When a bench run was made (UTC).

commit
    The git commit checked out where the bench ran, with + when the work tree had uncommitted
    changes; empty outside a repository.

machine
    The name of the hardware a bench run was placed on: the CPU's or GPU's. Runs of different
    machines are compared only with a warning.

threads
    The threads torch ran each op on (--threads): CPU results depend on it several-fold, so runs
    with different counts are compared only with a warning.

workloads
    How many workloads a bench run holds, failed ones included.

History
    One workload's results across the bench runs that included it (lightspeed history NAME).

Compare
    Two bench runs workload by workload (lightspeed compare RUN_A RUN_B, or --baseline FILE.json
    against the last run).

before | after
    A workload's step time in the first and the second run compared.

change
    The second run's step time over the first's, minus one: +10% is 10% slower.

noise
    The larger of the two runs' round spreads for a workload: the drift between minutes a change
    must exceed, besides the threshold, to count.

verdict
    slower (a regression: worse by more than both the threshold, default 5%, and the noise;
    --fail-on-regression exits 1 on one unless the runs are of different machines or thread
    counts), faster (better by as much), unchanged, or missing (in one run only, or failed in
    one).
"""


def _parse(text: str) -> tuple[Entry, ...]:
    """The entries of `text` (see the module docstring)."""
    entries = []
    for block in text.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith("#")]
        if not lines:
            continue
        term, *aliases = (name.strip() for name in lines[0].split("|"))
        definition = " ".join(" ".join(lines[1:]).split())
        if not definition or lines[0].startswith(" "):
            raise ValueError(f"glossary: the entry {lines[0].strip()!r} is malformed")
        entries.append(Entry(term=term, definition=definition, aliases=tuple(aliases)))
    return tuple(entries)


ENTRIES = _parse(_TEXT)

_PARENTHESES = re.compile(r"\([^()]*\)")
_NOT_WORD = re.compile(r"[^\w]+")


def key(text: str) -> str:
    """The form terms are compared in: lower case, details in parentheses and what
    follows a colon or semicolon left out, punctuation and "%" as spaces, numbers left
    out (so "Top 10 ops by headroom: where to look first" is "top ops by headroom").
    A term that is all parentheses ("(optimizer)") keeps what is inside."""
    text = text.casefold()
    stripped = _PARENTHESES.sub(" ", text)
    if stripped.strip():
        text = stripped
    text = re.split(r"[:;]", text, maxsplit=1)[0]
    words = _NOT_WORD.sub(" ", text.replace("_", " ")).split()
    return " ".join(w for w in words if not w.isdigit())


def _singular(text: str) -> str:
    """`text` with a plural last word made singular (replicates → replicate)."""
    if text.endswith("s") and not text.endswith("ss") and len(text) > 3:
        return text[:-1]
    return text


def _build_index(entries: tuple[Entry, ...]) -> dict[str, Entry]:
    """Each key of a term or alias → its entry; refuses a key two entries share."""
    index: dict[str, Entry] = {}
    for entry in entries:
        for name in (entry.term, *entry.aliases):
            k = key(name)
            if not k:
                raise ValueError(f"glossary: {name!r} has no key")
            other = index.setdefault(k, entry)
            if other is not entry:
                raise ValueError(f"glossary: {name!r} names both {other.term!r} and {entry.term!r}")
    return index


def _singular_index(index: dict[str, Entry]) -> dict[str, Entry | None]:
    """Keys made singular → the entry, where only one entry has that singular (else None)."""
    singular: dict[str, Entry | None] = {}
    for k, entry in index.items():
        s = _singular(k)
        singular[s] = entry if singular.get(s, entry) is entry else None
    return singular


_INDEX = _build_index(ENTRIES)
_SINGULAR = _singular_index(_INDEX)
_NAMES = {key(name): name for e in ENTRIES for name in (e.term, *e.aliases)}


def lookup(term: str) -> Entry | None:
    """The entry `term` names (by its key, see `key`), else the one its singular or
    plural names; None when there is none."""
    k = key(term)
    found = _INDEX.get(k)
    if found is not None or not k:
        return found
    return _SINGULAR.get(_singular(k)) or _INDEX.get(k + "s")


def close_matches(term: str, n: int = 3) -> list[str]:
    """At most `n` terms or aliases (one per entry) spelled like `term`, closest first,
    then those that contain it."""
    k = key(term)
    if not k:
        return []
    alike = difflib.get_close_matches(k, list(_INDEX), n=n, cutoff=0.6)
    containing = [c for c in _INDEX if len(k) >= 3 and k in c]
    found: dict[str, str] = {}  # one name per entry: the first that matched
    for c in alike + containing:
        found.setdefault(_INDEX[c].term, _NAMES[c])
    return list(found.values())[:n]


def sorted_entries() -> list[Entry]:
    """Every entry, by term, case ignored."""
    return sorted(ENTRIES, key=lambda e: e.term.casefold())


def markdown() -> str:
    """The glossary as Markdown: `docs/glossary.md`."""
    parts = [
        "# Glossary\n",
        "What each label, column and title of lightspeed's reports means, as lightspeed"
        " computes it; `lightspeed explain TERM` prints one entry.\n",
    ]
    for entry in sorted_entries():
        parts.append(f"### {_escaped(entry.term)}\n")
        if entry.aliases:
            parts.append("Also: " + ", ".join(f"`{a}`" for a in entry.aliases) + "\n")
        parts.append(_escaped(entry.definition) + "\n")
    return "\n".join(parts)


def _escaped(text: str) -> str:
    """Plain `text` that Markdown shows as it is (`__next__` is not bold)."""
    return re.sub(r"([\\`*_])", r"\\\1", text)

# spindle/tools/gdb/spindle.py — gdb commands for spindle fibers.
#
#     (gdb) source tools/gdb/spindle.py     (installed: <prefix>/share/spindle/gdb/)
#     (gdb) info fibers                     one line per live fiber
#     (gdb) info fibers -q                  the same without the wait sites (no unwinding)
#     (gdb) fiber bt <id> [bt options]      backtrace of a suspended fiber
#
# See docs/debugging.md. What it reads (include/spindle/runtime/detail/
# debug_layout.hpp): the stack registry, whose slots name the fiber that
# owns each stack, with the fiber's control block at a fixed place below
# the stack's top; found through the extern "C" objects
# `spindle_debug_layout` and `spindle_debug_stacks`, which give the
# registry's address and the offset of every field used here. So it needs
# no debug information for spindle's types: a release build's symbol table
# and unwind tables (.eh_frame, always there in C++) are enough.
#
# States (from the runtime's own words, read with the process stopped):
#
#   running    its home worker's `current`: the worker thread is running it
#   parked     suspended in park() on a waiter (a primitive's wait queue, a
#              join, a sleep); its context is saved
#   parking    inside park(), about to suspend (its waiter not yet marked
#              parked: the switch or the post-switch step is under way)
#   ready      in a ready queue: not started yet, yielded, or woken
#   suspended  suspended by an inline handoff: it runs again when the
#              fiber it handed its worker to suspends
#   finished   its body returned; listed until its handle lets it go
#
# A suspended fiber's backtrace. The context switch
# (include/spindle/arch/x86_64_sysv.hpp, aarch64.hpp) saves three words in
# the fiber's context record: the stack pointer, the frame pointer and the
# resume address. Every other register is declared clobbered at the switch,
# so the compiler has spilled whatever was live, and the unwind tables of the
# switching function describe its frame from the saved stack pointer alone.
# `fiber bt` therefore loads those three registers into the selected thread
# (frame 0), runs `bt`, and puts the thread's own values back.
#   x86-64:  rsp, rbp, rip
#   AArch64: sp, x29, pc
# A core file's registers cannot be written: there an unwinder presents the
# fiber's frames as the callers of the thread's frame 0 instead.

import struct

import gdb
import gdb.unwinder
from gdb.unwinder import Unwinder

# struct spindle_debug_layout_t (include/spindle/runtime/detail/debug_layout.hpp)
# and struct spindle_debug_stacks_t (src/memory/stack.cpp), version 1.
_LAYOUT_FORMAT = "<IIQ16IQQ"
_LAYOUT_NAMES = (
    "version size stacks "
    "fiber_size fiber_align fiber_id fiber_sp fiber_fp fiber_pc fiber_home fiber_resumer "
    "fiber_join_state fiber_parked_on fiber_pinned "
    "worker_current worker_index waiter_state park_parked_value park_notified_value "
    "join_done_value fiber_entry"
).split()
_STACKS_FORMAT = "<IIQQ8I"
_STACKS_NAMES = (
    "version size chunks bound slots_per_chunk slot_size slot_guard_base slot_usable "
    "slot_owner_id slot_owner_kind owner_fiber owner_generator"
).split()
_VERSION = 1


class _Layout:
    def __init__(self, fields):
        self.__dict__.update(fields)


def _read_struct(what, addr, fmt, names):
    version, size = struct.unpack("<II", bytes(gdb.selected_inferior().read_memory(addr, 8)))
    if version != _VERSION:
        raise gdb.GdbError(
            "spindle: %s version %d; this script reads version %d "
            "(use the spindle.py of the spindle the program was built with)" % (what, version, _VERSION)
        )
    need = struct.calcsize(fmt)
    if size < need:
        raise gdb.GdbError("spindle: %s is %d bytes, expected at least %d" % (what, size, need))
    raw = bytes(gdb.selected_inferior().read_memory(addr, need))
    return dict(zip(names, struct.unpack(fmt, raw)))


def _page_size():
    # The stacks' guard is one page (src/memory/stack.cpp); the page size
    # is the auxiliary vector's, which live processes and cores both have.
    try:
        for line in gdb.execute("info auxv", to_string=True).splitlines():
            words = line.split()
            if len(words) >= 3 and words[1] == "AT_PAGESZ":
                return int(words[-1], 0)
    except gdb.error:
        pass
    raise gdb.GdbError("spindle: cannot read the page size (AT_PAGESZ) from the auxiliary vector")


def _layout():
    try:
        addr = int(gdb.parse_and_eval("(unsigned long)&spindle_debug_layout"))
    except gdb.error:
        raise gdb.GdbError(
            "spindle: no spindle_debug_layout in this program: it does not link spindle's "
            "scheduler, or links one older than these commands"
        )
    fields = _read_struct("spindle_debug_layout", addr, _LAYOUT_FORMAT, _LAYOUT_NAMES)
    stacks = _read_struct("spindle_debug_stacks", fields["stacks"], _STACKS_FORMAT, _STACKS_NAMES)
    fields.update({"stacks_" + k: v for k, v in stacks.items()})
    fields["page"] = _page_size()
    return _Layout(fields)


def _u64(addr):
    return struct.unpack("<Q", bytes(gdb.selected_inferior().read_memory(addr, 8)))[0]


def _u32(addr):
    return struct.unpack("<I", bytes(gdb.selected_inferior().read_memory(addr, 4)))[0]


def _u8(addr):
    return bytes(gdb.selected_inferior().read_memory(addr, 1))[0]


class _Fiber:
    pass


def _fiber_addresses(lay):
    """The control block of every fiber that owns a stack, from the stack
    registry's slots (debug_layout.hpp): (address, id)."""
    bound = _u32(lay.stacks_bound)
    per = lay.stacks_slots_per_chunk
    for chunk_index in range((bound + per - 1) // per):
        chunk = _u64(lay.stacks_chunks + 8 * chunk_index)
        if chunk == 0:
            continue
        n = min(per, bound - chunk_index * per)
        raw = bytes(gdb.selected_inferior().read_memory(chunk, n * lay.stacks_slot_size))
        for i in range(n):
            slot = raw[i * lay.stacks_slot_size : (i + 1) * lay.stacks_slot_size]
            if slot[lay.stacks_slot_owner_kind] != lay.stacks_owner_fiber:
                continue
            (guard_base,) = struct.unpack_from("<Q", slot, lay.stacks_slot_guard_base)
            (usable,) = struct.unpack_from("<Q", slot, lay.stacks_slot_usable)
            (owner_id,) = struct.unpack_from("<Q", slot, lay.stacks_slot_owner_id)
            if guard_base == 0:
                continue
            top = guard_base + lay.page + usable
            yield (top - lay.fiber_size) & ~(lay.fiber_align - 1), owner_id


def _fibers(lay):
    """Every live fiber, by id, with its raw fields."""
    out = []
    for c, owner_id in _fiber_addresses(lay):
        try:
            ident = _u64(c + lay.fiber_id)
        except gdb.MemoryError:
            continue
        if ident != owner_id:
            continue  # being created or torn down: its control block is not (or no longer) there
        f = _Fiber()
        f.addr = c
        f.id = ident
        f.sp = _u64(c + lay.fiber_sp)
        f.fp = _u64(c + lay.fiber_fp)
        f.pc = _u64(c + lay.fiber_pc)
        f.home = _u64(c + lay.fiber_home)
        f.resumer = _u64(c + lay.fiber_resumer)
        f.join_state = _u64(c + lay.fiber_join_state)
        f.parked_on = _u64(c + lay.fiber_parked_on)
        f.pinned = _u8(c + lay.fiber_pinned) != 0
        out.append(f)
    out.sort(key=lambda f: f.id)
    resumed_by = {f.resumer: f for f in out if f.resumer != 0}
    for f in out:
        _classify(lay, f, resumed_by)
    return out


def _classify(lay, f, resumed_by):
    f.worker = _u32(f.home + lay.worker_index) if f.home != 0 else None
    f.detail = ""
    f.waiter_state = None
    if f.join_state == lay.join_done_value:
        f.state = "finished"
    elif f.home != 0 and _u64(f.home + lay.worker_current) == f.addr:
        f.state = "running"
    elif f.parked_on != 0:
        f.waiter_state = _u32(f.parked_on + lay.waiter_state)
        if f.waiter_state == lay.park_parked_value:
            f.state = "parked"
        elif f.waiter_state == lay.park_notified_value:
            f.state = "ready"
            f.detail = "woken"
        else:
            f.state = "parking"
    elif f.addr in resumed_by:
        f.state = "suspended"
        f.detail = "handed its worker to fiber %d" % resumed_by[f.addr].id
    else:
        f.state = "ready"
        if f.pc == lay.fiber_entry:
            f.detail = "not started"
    return f


def _find(lay, ident):
    for f in _fibers(lay):
        if f.id == ident:
            return f
    raise gdb.GdbError("spindle: no live fiber %d (info fibers lists them)" % ident)


def _arch_registers():
    name = gdb.selected_frame().architecture().name()
    if "x86-64" in name or "x86_64" in name:
        return ("rsp", "rbp", "rip")
    if "aarch64" in name:
        return ("sp", "x29", "pc")
    raise gdb.GdbError("spindle: fiber backtraces know x86-64 and AArch64, not %s" % name)


class _FrameId:
    def __init__(self, sp, pc):
        self.sp = sp
        self.pc = pc


class _FiberUnwinder(Unwinder):
    """For a core file, whose registers gdb will not change: while armed,
    it says that frame 0 of the selected thread was called by the fiber's
    saved context, so the fiber's frames follow frame 0 in a backtrace."""

    def __init__(self):
        super().__init__("spindle fiber")
        self.armed = None  # (register names, values)

    def __call__(self, pending_frame):
        if self.armed is None or pending_frame.level() != 0:
            return None
        names, values = self.armed
        # Frame 0's id takes the fiber's stack pointer: gdb stops a
        # backtrace whose caller frame lies below (inner to) its callee,
        # and the fiber's stack may lie anywhere below the thread's.
        sp = gdb.Value(values[0]).cast(pending_frame.read_register(names[0]).type)
        pc = pending_frame.read_register(names[2])
        info = pending_frame.create_unwind_info(_FrameId(sp, pc))
        for name, value in zip(names, values):
            info.add_saved_register(name, gdb.Value(value).cast(pending_frame.read_register(name).type))
        return info


_unwinder = _FiberUnwinder()
gdb.unwinder.register_unwinder(None, _unwinder, replace=True)


class _FiberView:
    """Shows a suspended fiber's saved context to gdb for the duration of a
    `with`. Live process: its saved sp, fp and pc are loaded into frame 0 of
    the selected thread, and the thread's own put back afterwards
    (`first` = 0: the fiber's innermost frame is frame 0). Core file (gdb
    cannot write its registers): the unwinder above makes the fiber's
    frames the callers of the thread's frame 0 (`first` = 1)."""

    def __init__(self, f):
        self.f = f
        self.first = 0
        self.saved = None

    def __enter__(self):
        if gdb.selected_thread() is None:
            raise gdb.GdbError("spindle: no thread selected (is the program running, or a core loaded?)")
        self.frame_level = gdb.selected_frame().level()
        gdb.newest_frame().select()
        self.regs = _arch_registers()
        values = (self.f.sp, self.f.fp, self.f.pc)
        frame = gdb.newest_frame()
        ulong = gdb.lookup_type("unsigned long")
        saved = [int(frame.read_register(r).cast(ulong)) for r in self.regs]
        try:
            # (The first write fails, changing nothing, where none is allowed.)
            for r, v in zip(self.regs, values):
                gdb.execute("set $%s = %d" % (r, v), to_string=True)
                self.saved = saved
        except gdb.error:
            if self.saved is not None:
                self.__exit__()
                raise
            _unwinder.armed = (self.regs, values)
            gdb.invalidate_cached_frames()
            self.first = 1
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            gdb.newest_frame().select()
            for r, v in zip(self.regs, self.saved):
                gdb.execute("set $%s = %d" % (r, v), to_string=True)
        else:
            _unwinder.armed = None
            gdb.invalidate_cached_frames()
        try:
            gdb.execute("frame %d" % self.frame_level, to_string=True)
        except gdb.error:
            pass
        return False


# Frames of the runtime itself (the park path): skipped when naming where a
# parked fiber waits.
_RUNTIME_PREFIXES = ("spindle::detail::", "spindle::arch::", "void spindle::detail::")


def _wait_site(f):
    """(primitive function, first caller outside spindle) of a suspended
    fiber, from its saved context."""
    primitive = None
    caller = None
    with _FiberView(f) as view:
        frame = gdb.newest_frame()
        for _ in range(view.first):
            frame = frame.older()
        depth = 0
        while frame is not None and depth < 64:
            name = frame.name() or ""
            if name and not name.startswith(_RUNTIME_PREFIXES):
                if name.startswith("spindle::"):
                    if primitive is None:
                        primitive = name
                else:
                    caller = name
                    break
            try:
                frame = frame.older()
            except gdb.error:
                break
            depth += 1
    return primitive, caller


def _short(name):
    """A function's name without its parameter list (and a trailing const):
    "spindle::mutex::lock_slow(spindle::detail::wait_node&)" -> "spindle::mutex::lock_slow";
    "(anonymous namespace)::f(int)" -> "(anonymous namespace)::f"."""
    s = name.strip()
    if s.endswith(" const"):
        s = s[: -len(" const")]
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        if s[i] == ")":
            depth += 1
        elif s[i] == "(":
            depth -= 1
            if depth == 0:
                return s[:i] if i > 0 else s
    return s


class InfoFibers(gdb.Command):
    """List the live spindle fibers: id, state, worker, what a parked fiber waits on.

Usage: info fibers [-q]
  -q   do not unwind parked fibers to name where they wait (faster with many fibers)

Worker: the worker running the fiber, or the one it last ran on or was queued
on; "-" for none. See `fiber bt` for a suspended fiber's backtrace."""

    def __init__(self):
        super().__init__("info fibers", gdb.COMMAND_STATUS)

    def invoke(self, arg, from_tty):
        quick = arg.strip() == "-q"
        if arg.strip() not in ("", "-q"):
            raise gdb.GdbError("usage: info fibers [-q]")
        lay = _layout()
        fibers = _fibers(lay)
        gdb.write("%-8s %-10s %-7s %s\n" % ("Id", "State", "Worker", "Waits on / notes"))
        for f in fibers:
            notes = []
            if f.state in ("parked", "parking"):
                notes.append("waiter 0x%x" % f.parked_on)
                if not quick and f.state == "parked":
                    try:
                        primitive, caller = _wait_site(f)
                    except gdb.error as e:
                        primitive, caller = None, None
                        notes.append("(no wait site: %s)" % e)
                    if primitive:
                        notes.append("in " + _short(primitive))
                    if caller:
                        notes.append("from " + _short(caller))
            if f.detail:
                notes.append(f.detail)
            if f.pinned:
                notes.append("pinned")
            worker = "-" if f.worker is None else str(f.worker)
            gdb.write(("%-8d %-10s %-7s %s" % (f.id, f.state, worker, " ".join(notes))).rstrip() + "\n")
        gdb.write("%d fibers\n" % len(fibers))


class FiberPrefix(gdb.Command):
    """Commands for spindle fibers: fiber bt."""

    def __init__(self):
        super().__init__("fiber", gdb.COMMAND_STACK, prefix=True)


class FiberBacktrace(gdb.Command):
    """Backtrace of a suspended spindle fiber, from its saved context.

Usage: fiber bt ID [bt options, e.g. full or -frame-arguments all]
ID is a fiber id from `info fibers`, or an expression (the whole argument,
or its first word when bt options follow). The fiber's saved stack
pointer, frame pointer and resume address are loaded into the selected
thread for the `bt`, and the thread's own are put back afterwards. A running
fiber's stack is its worker thread's: use `thread` and `bt`."""

    def __init__(self):
        super().__init__("fiber bt", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        arg = arg.strip()
        if not arg:
            raise gdb.GdbError("usage: fiber bt ID [bt options]")
        # The whole argument is the id's expression, or its first word is and
        # the rest goes to `bt`.
        try:
            ident, options = int(gdb.parse_and_eval(arg)), ""
        except gdb.error:
            first, _, options = arg.partition(" ")
            ident = int(gdb.parse_and_eval(first))
        lay = _layout()
        f = _find(lay, ident)
        if f.state == "running":
            raise gdb.GdbError(
                "spindle: fiber %d is running on worker %s: its frames are that worker thread's "
                "(find it with `thread apply all bt`)" % (f.id, f.worker)
            )
        if f.state == "finished":
            raise gdb.GdbError("spindle: fiber %d has finished: it has no stack to show" % f.id)
        if f.detail == "not started":
            gdb.write("fiber %d has not started: it will begin in spindle::detail::fiber_entry\n" % f.id)
            return
        if f.state == "parking":
            gdb.write("spindle: fiber %d is still suspending: its saved context may be stale\n" % f.id)
        gdb.write("fiber %d (%s%s)\n" % (f.id, f.state, ", " + f.detail if f.detail else ""))
        with _FiberView(f) as view:
            if view.first != 0:
                gdb.write("(a core file: frame #0 is the selected thread's own; the fiber's frames start at #1)\n")
            gdb.execute(("bt " + options).strip(), from_tty)


InfoFibers()
FiberPrefix()
FiberBacktrace()

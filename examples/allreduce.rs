//! A NCCL-style ring all-reduce over RDMA, the project's main demo.
//!
//! Like NCCL's net_ib transport it never links libibverbs or libcuda: it `dlopen`s
//! `libibverbs.so` (fallback `.so.1`) and looks the verbs up with `dlvsym(h, name, "IBVERBS_1.1")`
//! (`ibv_reg_mr_iova2` with IBVERBS_1.8), and `dlopen`s `libcuda.so.1` for device buffers. Buffers
//! are registered the way NCCL does: page-aligned, LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|
//! REMOTE_ATOMIC, plus RELAXED_ORDERING through ibv_reg_mr_iova2 unless
//! NCCL_IB_PCI_RELAXED_ORDERING=0. `--runtime hip` (libamdhip64.so[.6|.5], RCCL-style) and
//! `--runtime maca` (libmcruntime.so; MCCL WARN lines and MCCL_* knobs, as MCCL) put the buffers
//! in HIP or MACA device memory instead of CUDA's. Data moves with RDMA WRITE_WITH_IMM around a ring
//! (reduce-scatter, then all-gather); the result is checked element by element.
//!
//! Ranks: `--ranks N` forks N copies of itself; under `mpirun` each process is one rank
//! (OMPI_COMM_WORLD_RANK/SIZE) and `--rundir` must name a directory all ranks see.
//!
//! ```text
//! cargo run --release --example allreduce -- --ranks 4 --size 64M
//! mrshim sim -- mrshim exec -- target/release/examples/allreduce --ranks 2
//! ```

use mrshim_verbs as v;
use std::ffi::{c_int, c_uint, c_void, CString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

const FULL: c_uint = 0xf; // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC
const RELAXED_ORDERING: c_uint = mrshim_verbs::access::RELAXED_ORDERING;

struct Opts {
    ranks: usize,
    size: usize,
    iters: usize,
    host_mem: bool,
    runtime: Runtime,
    device: c_int,
    rundir: Option<PathBuf>,
    /// Each rank on a CPU of its own (the rank-th CPU it may run on), its NIC's thread with it.
    pin: bool,
}

fn parse_size(s: &str) -> Option<usize> {
    let (n, m) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<usize>().ok().map(|n| n * m)
}

fn opts() -> Result<Opts, String> {
    let mut o = Opts {
        ranks: 2,
        size: 1 << 20,
        iters: 3,
        host_mem: false,
        runtime: Runtime::Cuda,
        device: 0,
        rundir: None,
        pin: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |what: &str| args.next().ok_or(format!("{a} needs {what}"));
        match a.as_str() {
            "--ranks" => o.ranks = val("a number")?.parse().map_err(|_| "--ranks: not a number")?,
            "--size" => o.size = parse_size(&val("a size")?).ok_or("--size: e.g. 4, 64K, 16M")?,
            "--iters" => o.iters = val("a number")?.parse().map_err(|_| "--iters: not a number")?,
            "--host-mem" => o.host_mem = true,
            "--pin" => o.pin = true,
            "--device" => o.device = val("a device ordinal")?.parse().map_err(|_| "--device: not a number")?,
            "--runtime" => o.runtime = Runtime::parse(&val("cuda, hip or maca")?).ok_or("--runtime: cuda, hip or maca")?,
            "--rundir" => o.rundir = Some(val("a directory")?.into()),
            _ => return Err(format!("unknown argument {a}; usage: allreduce [--ranks N] [--size BYTES[K|M|G]] [--iters N] [--host-mem] [--pin] [--runtime cuda|hip|maca] [--device N] [--rundir DIR]")),
        }
    }
    let _ = PREFIX.set(o.runtime.prefix());
    if o.ranks < 1 || o.size < 1 || o.iters < 1 {
        return Err("need --ranks >= 1, --size >= 1, --iters >= 1".into());
    }
    Ok(o)
}

// ------------------------------------------------------------------ dynamic loading, NCCL style

fn dl_open(names: &[&str]) -> Option<*mut c_void> {
    names.iter().find_map(|n| {
        let c = CString::new(*n).unwrap();
        // SAFETY: dlopen with a NUL-terminated name.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
        (!h.is_null()).then_some(h)
    })
}

fn dl_sym<T: Copy>(h: *mut c_void, name: &str, version: Option<&str>) -> Result<T, String> {
    let n = CString::new(name).unwrap();
    // SAFETY: dlvsym/dlsym on a live handle with NUL-terminated strings.
    let p = unsafe {
        match version {
            Some(ver) => {
                let v = CString::new(ver).unwrap();
                libc::dlvsym(h, n.as_ptr(), v.as_ptr())
            }
            None => libc::dlsym(h, n.as_ptr()),
        }
    };
    if p.is_null() {
        return Err(format!("{name}{} not found", version.map(|v| format!("@{v}")).unwrap_or_default()));
    }
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: T is the function pointer type of this symbol (checked to be pointer-sized).
    Ok(unsafe { std::mem::transmute_copy(&p) })
}

struct Verbs {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut v::ibv_device,
    open_device: unsafe extern "C" fn(*mut v::ibv_device) -> *mut v::ibv_context,
    alloc_pd: unsafe extern "C" fn(*mut v::ibv_context) -> *mut v::ibv_pd,
    reg_mr: unsafe extern "C" fn(*mut v::ibv_pd, *mut c_void, usize, c_int) -> *mut v::ibv_mr,
    reg_mr_iova2: Option<unsafe extern "C" fn(*mut v::ibv_pd, *mut c_void, usize, u64, c_uint) -> *mut v::ibv_mr>,
    dereg_mr: unsafe extern "C" fn(*mut v::ibv_mr) -> c_int,
    create_cq: unsafe extern "C" fn(
        *mut v::ibv_context,
        c_int,
        *mut c_void,
        *mut v::ibv_comp_channel,
        c_int,
    ) -> *mut v::ibv_cq,
    create_qp: unsafe extern "C" fn(*mut v::ibv_pd, *mut v::ibv_qp_init_attr) -> *mut v::ibv_qp,
    modify_qp: unsafe extern "C" fn(*mut v::ibv_qp, *mut v::ibv_qp_attr, c_int) -> c_int,
    query_port: unsafe extern "C" fn(*mut v::ibv_context, u8, *mut v::ibv_port_attr) -> c_int,
    query_gid: unsafe extern "C" fn(*mut v::ibv_context, u8, c_int, *mut v::ibv_gid) -> c_int,
}

impl Verbs {
    fn load() -> Result<Verbs, String> {
        let h = dl_open(&["libibverbs.so", "libibverbs.so.1"]).ok_or("NET/IB : Unable to open libibverbs.so[.1]")?;
        Ok(Verbs {
            get_device_list: dl_sym(h, "ibv_get_device_list", Some("IBVERBS_1.1"))?,
            open_device: dl_sym(h, "ibv_open_device", Some("IBVERBS_1.1"))?,
            alloc_pd: dl_sym(h, "ibv_alloc_pd", Some("IBVERBS_1.1"))?,
            reg_mr: dl_sym(h, "ibv_reg_mr", Some("IBVERBS_1.1"))?,
            reg_mr_iova2: dl_sym(h, "ibv_reg_mr_iova2", Some("IBVERBS_1.8")).ok(),
            dereg_mr: dl_sym(h, "ibv_dereg_mr", Some("IBVERBS_1.1"))?,
            create_cq: dl_sym(h, "ibv_create_cq", Some("IBVERBS_1.1"))?,
            create_qp: dl_sym(h, "ibv_create_qp", Some("IBVERBS_1.1"))?,
            modify_qp: dl_sym(h, "ibv_modify_qp", Some("IBVERBS_1.1"))?,
            query_port: dl_sym(h, "ibv_query_port", Some("IBVERBS_1.1"))?,
            query_gid: dl_sym(h, "ibv_query_gid", Some("IBVERBS_1.1"))?,
        })
    }
}

type CuDevPtr = u64;

/// Which GPU runtime holds the buffers (`--runtime`): the collective library each one goes with
/// names the warnings and the knobs (NCCL_* for CUDA, RCCL reads NCCL_* too, MCCL_* for MACA).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runtime {
    Cuda,
    Hip,
    Maca,
}

impl Runtime {
    fn parse(s: &str) -> Option<Runtime> {
        Some(match s {
            "cuda" => Runtime::Cuda,
            "hip" => Runtime::Hip,
            "maca" => Runtime::Maca,
            _ => return None,
        })
    }

    /// What the collective library prints and reads its knobs under.
    fn prefix(self) -> &'static str {
        if self == Runtime::Maca {
            "MCCL"
        } else {
            "NCCL"
        }
    }
}

static PREFIX: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

fn prefix() -> &'static str {
    PREFIX.get().copied().unwrap_or("NCCL")
}

/// `NCCL_<name>` or `MCCL_<name>`.
fn knob(name: &str) -> Option<String> {
    std::env::var(format!("{}_{name}", prefix())).ok()
}

/// The GPU calls the demo needs: allocate, and copy for the reduction.
enum Gpu {
    /// CUDA driver API (cuMemAlloc_v2, cuMemcpyHtoD_v2/DtoH_v2).
    Cuda {
        mem_alloc: unsafe extern "C" fn(*mut CuDevPtr, usize) -> c_int,
        htod: unsafe extern "C" fn(CuDevPtr, *const c_void, usize) -> c_int,
        dtoh: unsafe extern "C" fn(*mut c_void, CuDevPtr, usize) -> c_int,
    },
    /// HIP or MACA runtime API: hipMalloc/mcMalloc, hipMemcpy/mcMemcpy with a direction (1 =
    /// host to device, 2 = device to host, as cudaMemcpyKind).
    Runtime {
        name: &'static str,
        malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int,
        memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_uint) -> c_int,
        set_device: unsafe extern "C" fn(c_int) -> c_int,
        get_device: unsafe extern "C" fn(*mut c_int) -> c_int,
        /// Where the buffers live (`--device`); the thread's current device stays 0, so that
        /// whatever copies them (the shim's bounce engine) must not change it.
        device: c_int,
    },
}

const HOST_TO_DEVICE: c_uint = 1;
const DEVICE_TO_HOST: c_uint = 2;

impl Gpu {
    /// The runtime's library, dlopen'ed like the collective libraries do; None if not installed.
    fn load(rt: Runtime, device: c_int) -> Option<Result<Gpu, String>> {
        match rt {
            Runtime::Cuda if device != 0 => Some(Err("--device: for hip and maca".into())),
            Runtime::Cuda => Some(Gpu::load_cuda(dl_open(&["libcuda.so.1"])?)),
            Runtime::Hip => {
                let h = dl_open(&["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"])?;
                Some(Gpu::load_runtime(h, "hip", device))
            }
            Runtime::Maca => Some(Gpu::load_runtime(dl_open(&["libmcruntime.so"])?, "mc", device)),
        }
    }

    fn load_cuda(h: *mut c_void) -> Result<Gpu, String> {
        let init: unsafe extern "C" fn(c_uint) -> c_int = dl_sym(h, "cuInit", None)?;
        let device_get: unsafe extern "C" fn(*mut c_int, c_int) -> c_int = dl_sym(h, "cuDeviceGet", None)?;
        let ctx_create: unsafe extern "C" fn(*mut *mut c_void, c_uint, c_int) -> c_int =
            dl_sym(h, "cuCtxCreate_v2", None)?;
        let mut dev = 0;
        let mut ctx = null_mut();
        // SAFETY: CUDA driver API calls in the documented order with valid out pointers.
        let rc = unsafe {
            match init(0) {
                0 => match device_get(&mut dev, 0) {
                    0 => ctx_create(&mut ctx, 0, dev),
                    e => e,
                },
                e => e,
            }
        };
        if rc != 0 {
            return Err(format!("CUDA initialisation failed: CUresult {rc}"));
        }
        Ok(Gpu::Cuda {
            mem_alloc: dl_sym(h, "cuMemAlloc_v2", None)?,
            htod: dl_sym(h, "cuMemcpyHtoD_v2", None)?,
            dtoh: dl_sym(h, "cuMemcpyDtoH_v2", None)?,
        })
    }

    /// hipSetDevice(0)/mcSetDevice(0), then the allocation and copy calls.
    fn load_runtime(h: *mut c_void, p: &'static str, device: c_int) -> Result<Gpu, String> {
        let set_device: unsafe extern "C" fn(c_int) -> c_int = dl_sym(h, &format!("{p}SetDevice"), None)?;
        // SAFETY: plain call with a device ordinal.
        let rc = unsafe { set_device(0) };
        if rc != 0 {
            return Err(format!("{p}SetDevice(0) failed: error {rc}"));
        }
        Ok(Gpu::Runtime {
            name: p,
            malloc: dl_sym(h, &format!("{p}Malloc"), None)?,
            memcpy: dl_sym(h, &format!("{p}Memcpy"), None)?,
            set_device,
            get_device: dl_sym(h, &format!("{p}GetDevice"), None)?,
            device,
        })
    }

    /// The application's current device is still the one it set (0).
    fn check_current_device(&self) -> Result<(), String> {
        if let Gpu::Runtime { get_device, name, .. } = self {
            let mut d = -1;
            // SAFETY: valid out pointer.
            unsafe { get_device(&mut d) };
            if d != 0 {
                return Err(format!("{name}GetDevice says {d}: the current device was changed behind the application"));
            }
        }
        Ok(())
    }

    fn alloc(&self, len: usize) -> Result<u64, String> {
        let (rc, d) = match self {
            Gpu::Cuda { mem_alloc, .. } => {
                let mut d = 0;
                // SAFETY: valid out pointer.
                (unsafe { mem_alloc(&mut d, len) }, d)
            }
            Gpu::Runtime { malloc, set_device, device, .. } => {
                let mut d = null_mut();
                // SAFETY: valid out pointer; the allocation goes to `device`, then the current
                // device is 0 again.
                let rc = unsafe {
                    set_device(*device);
                    let rc = malloc(&mut d, len);
                    set_device(0);
                    rc
                };
                (rc, d as u64)
            }
        };
        if rc != 0 {
            return Err(format!("{}Malloc({len}) failed: error {rc}", self.name()));
        }
        Ok(d)
    }

    fn name(&self) -> &'static str {
        match self {
            Gpu::Cuda { .. } => "cuMem",
            Gpu::Runtime { name, .. } => name,
        }
    }

    /// `n` bytes from device address `src` to host `dst`.
    fn to_host(&self, dst: *mut u8, src: u64, n: usize) {
        // SAFETY: device range within an allocation, host buffer of n bytes.
        let rc = unsafe {
            match self {
                Gpu::Cuda { dtoh, .. } => dtoh(dst.cast(), src, n),
                Gpu::Runtime { memcpy, .. } => memcpy(dst.cast(), src as *const c_void, n, DEVICE_TO_HOST),
            }
        };
        assert_eq!(rc, 0, "{} copy to host", self.name());
    }

    fn to_device(&self, dst: u64, src: *const u8, n: usize) {
        // SAFETY: as in to_host, the other way.
        let rc = unsafe {
            match self {
                Gpu::Cuda { htod, .. } => htod(dst, src.cast(), n),
                Gpu::Runtime { memcpy, .. } => memcpy(dst as *mut c_void, src.cast(), n, HOST_TO_DEVICE),
            }
        };
        assert_eq!(rc, 0, "{} copy to device", self.name());
    }
}

/// A buffer the NIC reads or writes: device memory (CPU access through copies only) or host.
struct Buf {
    addr: u64,
    len: usize,
}

enum Mem {
    Host,
    Device(Gpu),
}

impl Mem {
    fn alloc(&self, len: usize) -> Result<Buf, String> {
        match self {
            Mem::Host => {
                let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
                // SAFETY: non-zero size, page alignment; the buffer lives for the whole process.
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                Ok(Buf { addr: p as u64, len })
            }
            Mem::Device(gpu) => Ok(Buf { addr: gpu.alloc(len)?, len }),
        }
    }

    /// Bytes [off, off+n) of `b` into `out`.
    fn read(&self, b: &Buf, off: usize, out: &mut [u8]) {
        match self {
            // SAFETY: host buffers are plain memory of b.len bytes; off+n is in range.
            Mem::Host => unsafe {
                std::ptr::copy_nonoverlapping((b.addr as usize + off) as *const u8, out.as_mut_ptr(), out.len())
            },
            Mem::Device(gpu) => gpu.to_host(out.as_mut_ptr(), b.addr + off as u64, out.len()),
        }
    }

    fn write(&self, b: &Buf, off: usize, data: &[u8]) {
        match self {
            // SAFETY: as in read().
            Mem::Host => unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), (b.addr as usize + off) as *mut u8, data.len())
            },
            Mem::Device(gpu) => gpu.to_device(b.addr + off as u64, data.as_ptr(), data.len()),
        }
    }
}

// ------------------------------------------------------------------ one rank

/// What a rank publishes for its neighbours.
#[derive(Clone, Copy, Default)]
struct Info {
    qp_from_prev: u32,
    qp_to_next: u32,
    lid: u16,
    gid: [u8; 16],
    tmp_addr: u64,
    tmp_rkey: u32,
    out_addr: u64,
    out_rkey: u32,
}

impl Info {
    fn encode(&self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{} {} {} {gid} {} {} {} {}",
            self.qp_from_prev, self.qp_to_next, self.lid, self.tmp_addr, self.tmp_rkey, self.out_addr, self.out_rkey
        )
    }

    fn decode(s: &str) -> Option<Info> {
        let f: Vec<&str> = s.split_whitespace().collect();
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = u8::from_str_radix(f.get(3)?.get(i * 2..i * 2 + 2)?, 16).ok()?;
        }
        Some(Info {
            qp_from_prev: f[0].parse().ok()?,
            qp_to_next: f[1].parse().ok()?,
            lid: f[2].parse().ok()?,
            gid,
            tmp_addr: f[4].parse().ok()?,
            tmp_rkey: f[5].parse().ok()?,
            out_addr: f[6].parse().ok()?,
            out_rkey: f[7].parse().ok()?,
        })
    }
}

fn publish(dir: &Path, rank: usize, info: &Info) {
    let tmp = dir.join(format!(".rank-{rank}.tmp"));
    std::fs::write(&tmp, info.encode()).unwrap();
    std::fs::rename(tmp, dir.join(format!("rank-{rank}"))).unwrap();
}

fn wait_for(dir: &Path, rank: usize) -> Result<Info, String> {
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(dir.join(format!("rank-{rank}"))) {
            return Info::decode(&s).ok_or(format!("bad rendezvous file for rank {rank}"));
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err(format!("rank {rank} never showed up in {}", dir.display()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// NCCL's warning format: `host:pid:tid [rank] NCCL WARN ...` (MCCL WARN for MACA, as MCCL prints).
fn warn(rank: usize, msg: &str) {
    // The system call: glibc's gettid() wrapper is 2.30+, and the example also runs from the
    // portable (glibc 2.17) build.
    // SAFETY: SYS_gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    say(&format!("{}:{}:{} [{rank}] {} WARN {msg}", hostname(), std::process::id(), tid, prefix()));
}

/// One stderr line in one write(2): the ranks share the terminal or pipe, and `eprintln!` writes
/// a line in pieces that other ranks' pieces interleave with (NCCL's own fprintf of a whole
/// line does not).
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Element j of rank r's input; the expected result is the sum over ranks.
fn input(r: usize, j: usize) -> u32 {
    (j as u32).wrapping_mul(2_654_435_761).wrapping_add(r as u32 * 7919 + 1)
}

struct Ring {
    ctx: *mut v::ibv_context,
    cq: *mut v::ibv_cq,
    to_next: *mut v::ibv_qp,
    from_prev: *mut v::ibv_qp,
}

impl Ring {
    fn post_write(&self, laddr: u64, len: usize, lkey: u32, raddr: u64, rkey: u32, imm: u32) {
        let mut sge = v::ibv_sge { addr: laddr, length: len as u32, lkey };
        // SAFETY: plain old data.
        let mut wr: v::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = v::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = v::ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.__bindgen_anon_1.imm_data = imm.to_be();
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
        let mut bad = null_mut();
        // SAFETY: the context's ops table serves ibv_post_send (static inline in verbs.h).
        let rc = unsafe { (*self.ctx).ops.post_send.unwrap()(self.to_next, &mut wr, &mut bad) };
        assert_eq!(rc, 0, "post_send");
    }

    fn post_recvs(&self, qp: *mut v::ibv_qp, n: usize) {
        for _ in 0..n {
            // SAFETY: a zero-SGE receive for WRITE_WITH_IMM notifications.
            let mut wr: v::ibv_recv_wr = unsafe { std::mem::zeroed() };
            let mut bad = null_mut();
            // SAFETY: ops table as above.
            let rc = unsafe { (*self.ctx).ops.post_recv.unwrap()(qp, &mut wr, &mut bad) };
            assert_eq!(rc, 0, "post_recv");
        }
    }

    /// Polls completions until `done` holds: our writes count down `pending`, the neighbour's
    /// WRITE_WITH_IMM notifications collect in `got`.
    fn poll_until(
        &self,
        rank: usize,
        pending: &mut usize,
        got: &mut Vec<u32>,
        done: impl Fn(usize, &[u32]) -> bool,
    ) -> Result<(), String> {
        let t = Instant::now();
        let mut idle = 0u32;
        while !done(*pending, got) {
            // SAFETY: plain old data.
            let mut wc: [mrshim_verbs::sys::ibv_wc; 8] = unsafe { std::mem::zeroed() };
            // SAFETY: ops table; wc has room for 8.
            let n = unsafe { (*self.ctx).ops.poll_cq.unwrap()(self.cq, 8, wc.as_mut_ptr()) };
            for w in &wc[..n.max(0) as usize] {
                // SAFETY: both ibv_wc types share rdma-core's layout.
                let w: &v::ibv_wc = unsafe { &*(w as *const _ as *const v::ibv_wc) };
                if w.status != v::ibv_wc_status::IBV_WC_SUCCESS {
                    warn(
                        rank,
                        &format!(
                            "NET/IB : Got completion with error {}, opcode {}, vendor err {}",
                            w.status, w.opcode, w.vendor_err
                        ),
                    );
                    return Err("completion error".into());
                }
                if w.opcode == v::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM {
                    // SAFETY: imm_data is valid with IBV_WC_WITH_IMM.
                    got.push(u32::from_be(unsafe { w.__bindgen_anon_1.imm_data }));
                } else {
                    *pending -= 1;
                }
            }
            // Ranks and their simulated NICs share few cores: after a run of empty polls give
            // the NIC threads the CPU (and look at the clock only then).
            idle = if n > 0 { 0 } else { idle + 1 };
            if idle % 64 == 63 {
                std::thread::yield_now();
                if t.elapsed() > Duration::from_secs(120) {
                    return Err("timed out waiting for completions".into());
                }
            }
        }
        Ok(())
    }

    /// Waits for the neighbour's write carrying `imm`.
    fn wait(&self, rank: usize, imm: u32, pending: &mut usize, got: &mut Vec<u32>) -> Result<(), String> {
        self.poll_until(rank, pending, got, |_, g| g.contains(&imm))?;
        got.retain(|&x| x != imm);
        Ok(())
    }
}

fn connect(
    vb: &Verbs,
    qp: *mut v::ibv_qp,
    port: &v::ibv_port_attr,
    gid_index: i32,
    dest: u32,
    peer: &Info,
) -> Result<(), String> {
    use v::rc;
    let roce = port.link_layer == v::IBV_LINK_LAYER_ETHERNET as u8;
    let grh = roce.then_some(rc::Grh { dgid: peer.gid, sgid_index: gid_index as u8, hop_limit: 255 });
    let rtr = rc::Rtr {
        ah_attr: rc::ah(1, peer.lid, grh),
        path_mtu: port.active_mtu,
        dest_qp_num: dest,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
    };
    let rts = rc::Rts { sq_psn: 0, timeout: 20, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1 };
    for (mut a, mask) in [rc::init(1, FULL), rtr.attr(), rts.attr()] {
        // SAFETY: qp is live; modify_qp reads the attributes named in the mask.
        let rc = unsafe { (vb.modify_qp)(qp, &mut a, mask) };
        if rc != 0 {
            return Err(format!("ibv_modify_qp failed with error {}", std::io::Error::from_raw_os_error(rc)));
        }
    }
    Ok(())
}

/// Registers a buffer like NCCL's ncclIbRegMr: relaxed ordering via iova2 when enabled.
fn register(vb: &Verbs, pd: *mut v::ibv_pd, b: &Buf, rank: usize) -> Result<*mut v::ibv_mr, String> {
    let relaxed = knob("IB_PCI_RELAXED_ORDERING").is_none_or(|v| v != "0") && vb.reg_mr_iova2.is_some();
    // SAFETY: pd is live; the buffer spans len bytes at addr.
    let (mr, call) = unsafe {
        if relaxed {
            (
                (vb.reg_mr_iova2.unwrap())(pd, b.addr as *mut c_void, b.len, b.addr, FULL | RELAXED_ORDERING),
                "ibv_reg_mr_iova2",
            )
        } else {
            ((vb.reg_mr)(pd, b.addr as *mut c_void, b.len, FULL as c_int), "ibv_reg_mr")
        }
    };
    if mr.is_null() {
        let e = std::io::Error::last_os_error();
        let msg = e.to_string();
        let msg = msg.split(" (os error").next().unwrap_or(&msg).to_string();
        warn(rank, &format!("Call to {call} failed with error {msg}"));
        return Err(format!("{call} failed"));
    }
    Ok(mr)
}

fn run_rank(o: &Opts, rank: usize, n: usize, dir: &Path) -> Result<(), String> {
    let vb = Verbs::load().inspect_err(|e| warn(rank, e))?;
    let mem = if o.host_mem {
        Mem::Host
    } else {
        match Gpu::load(o.runtime, o.device) {
            Some(Ok(gpu)) => Mem::Device(gpu),
            Some(Err(e)) => return Err(e),
            None => Mem::Host,
        }
    };
    let words = o.size.div_ceil(4);
    let chunk_words = words.div_ceil(n);
    let chunk = chunk_words * 4;
    let total = (chunk * n).div_ceil(4096) * 4096;
    // buf: this rank's input, reduced in place chunk by chunk; tmp: where prev's partial sums
    // land (one chunk per step, never reused within an iteration); out: the all-gather result.
    let buf = mem.alloc(total)?;
    let tmp = mem.alloc(total)?;
    let out = mem.alloc(total)?;
    let mut host = vec![0u8; chunk * n];
    for j in 0..words {
        host[j * 4..j * 4 + 4].copy_from_slice(&input(rank, j).to_le_bytes());
    }
    mem.write(&buf, 0, &host);

    // SAFETY: verbs calls in the order the API requires; every object is checked before use.
    let (ctx, pd, port, gid) = unsafe {
        let mut num = 0;
        let list = (vb.get_device_list)(&mut num);
        if list.is_null() || num < 1 {
            warn(rank, "NET/IB : No device found.");
            return Err("no RDMA device".into());
        }
        let ctx = (vb.open_device)(*list);
        let pd = if ctx.is_null() { null_mut() } else { (vb.alloc_pd)(ctx) };
        if pd.is_null() {
            return Err("ibv_open_device/ibv_alloc_pd failed".into());
        }
        let mut port: v::ibv_port_attr = std::mem::zeroed();
        (vb.query_port)(ctx, 1, &mut port);
        let mut gid: v::ibv_gid = std::mem::zeroed();
        let gid_index = knob("IB_GID_INDEX").and_then(|s| s.parse().ok()).unwrap_or(3);
        (vb.query_gid)(ctx, 1, gid_index, &mut gid);
        (ctx, pd, port, (gid_index, gid.raw))
    };
    let buf_mr = register(&vb, pd, &buf, rank)?;
    let tmp_mr = register(&vb, pd, &tmp, rank)?;
    let out_mr = register(&vb, pd, &out, rank)?;

    // SAFETY: as above.
    let ring = unsafe {
        let cq = (vb.create_cq)(ctx, 4 * n as c_int + 64, null_mut(), null_mut(), 0);
        let mut ia: v::ibv_qp_init_attr = std::mem::zeroed();
        ia.send_cq = cq;
        ia.recv_cq = cq;
        ia.qp_type = v::ibv_qp_type::IBV_QPT_RC;
        ia.cap.max_send_wr = 2 * n as u32 + 8;
        ia.cap.max_recv_wr = 2 * n as u32 + 8;
        ia.cap.max_send_sge = 1;
        ia.cap.max_recv_sge = 1;
        let to_next = (vb.create_qp)(pd, &mut ia);
        let from_prev = (vb.create_qp)(pd, &mut ia);
        if cq.is_null() || to_next.is_null() || from_prev.is_null() {
            return Err("ibv_create_cq/ibv_create_qp failed".into());
        }
        Ring { ctx, cq, to_next, from_prev }
    };
    // SAFETY: the QPs are live.
    let me = unsafe {
        Info {
            qp_from_prev: (*ring.from_prev).qp_num,
            qp_to_next: (*ring.to_next).qp_num,
            lid: port.lid,
            gid: gid.1,
            tmp_addr: tmp.addr,
            tmp_rkey: (*tmp_mr).rkey,
            out_addr: out.addr,
            out_rkey: (*out_mr).rkey,
        }
    };
    publish(dir, rank, &me);
    let next = wait_for(dir, (rank + 1) % n)?;
    let prev = wait_for(dir, (rank + n - 1) % n)?;
    connect(&vb, ring.to_next, &port, gid.0, next.qp_from_prev, &next)?;
    connect(&vb, ring.from_prev, &port, gid.0, prev.qp_to_next, &prev)?;
    // Writes from prev arrive on from_prev and consume its receive WQEs.
    ring.post_recvs(ring.from_prev, 2 * n);
    let mut bar = Barrier::open(dir, rank, n)?;
    std::fs::write(dir.join(format!("ready-{rank}")), "").unwrap();
    for r in 0..n {
        let t = Instant::now();
        while !dir.join(format!("ready-{r}")).exists() {
            if t.elapsed() > Duration::from_secs(60) {
                return Err(format!("rank {r} never got ready"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    // SAFETY: the MRs are live.
    let (lkey_buf, lkey_out) = unsafe { ((*buf_mr).lkey, (*out_mr).lkey) };
    let start = Instant::now();
    let mut pending = 0usize;
    let mut got = Vec::new();
    let mut mine = vec![0u8; chunk];
    let mut theirs = vec![0u8; chunk];
    // Chunk c of a local buffer into the same place of the neighbour's buffer at `dst`.
    let write_chunk = |c: usize, src: u64, lkey: u32, dst: u64, rkey: u32, imm: u32| {
        let off = (c * chunk) as u64;
        ring.post_write(src + off, chunk, lkey, dst + off, rkey, imm)
    };
    // Each iteration's time too: its median is the bench's figure (benches/rescue.rs), which a
    // rank preempted for a few iterations on a busy host moves far less than the mean.
    let mut each = Vec::with_capacity(o.iters);
    for it in 0..o.iters {
        let t_it = Instant::now();
        if it > 0 {
            // Fresh input each iteration so every pass is checked, not just the first.
            mem.write(&buf, 0, &host);
        }
        let base = (it as u32) << 16;
        // reduce-scatter: at step s send chunk (r-s), receive chunk (r-s-1) into tmp and add.
        for s in 0..n.saturating_sub(1) {
            let c = (rank + n - s) % n;
            write_chunk(c, buf.addr, lkey_buf, next.tmp_addr, next.tmp_rkey, base | s as u32);
            pending += 1;
            ring.wait(rank, base | s as u32, &mut pending, &mut got)?;
            let rc = (rank + 2 * n - s - 1) % n;
            mem.read(&buf, rc * chunk, &mut mine);
            mem.read(&tmp, rc * chunk, &mut theirs);
            for (a, b) in mine.chunks_exact_mut(4).zip(theirs.chunks_exact(4)) {
                let x =
                    u32::from_le_bytes(a.try_into().unwrap()).wrapping_add(u32::from_le_bytes(b.try_into().unwrap()));
                a.copy_from_slice(&x.to_le_bytes());
            }
            mem.write(&buf, rc * chunk, &mine);
        }
        // all-gather: the chunk this rank finished, (r+1), goes to out; at step s send chunk
        // (r+1-s) from out into next's out.
        let own = (rank + 1) % n;
        mem.read(&buf, own * chunk, &mut mine);
        mem.write(&out, own * chunk, &mine);
        for s in 0..n.saturating_sub(1) {
            let c = (rank + 1 + n - s) % n;
            let imm = base | 0x8000 | s as u32;
            write_chunk(c, out.addr, lkey_out, next.out_addr, next.out_rkey, imm);
            pending += 1;
            ring.wait(rank, imm, &mut pending, &mut got)?;
        }
        ring.poll_until(rank, &mut pending, &mut got, |p, _| p == 0)?;
        ring.post_recvs(ring.from_prev, 2 * n.saturating_sub(1));
        // Nobody may write the next iteration into our buffers before we are done reading.
        bar.wait()?;
        let mut result = vec![0u8; chunk * n];
        mem.read(&out, 0, &mut result);
        for j in 0..words {
            let want = (0..n).fold(0u32, |acc, r| acc.wrapping_add(input(r, j)));
            let got = u32::from_le_bytes(result[j * 4..j * 4 + 4].try_into().unwrap());
            if got != want {
                return Err(format!("rank {rank}: iteration {it}: element {j} is {got:#x}, expected {want:#x}"));
            }
        }
        bar.wait()?;
        each.push(t_it.elapsed().as_secs_f64());
    }
    let secs = start.elapsed().as_secs_f64();
    each.sort_by(|a, b| a.total_cmp(b));
    let mid = (each[(each.len() - 1) / 2] + each[each.len() / 2]) / 2.0;
    // SAFETY: MRs are live and no longer used.
    unsafe {
        (vb.dereg_mr)(buf_mr);
        (vb.dereg_mr)(tmp_mr);
        (vb.dereg_mr)(out_mr);
    }
    if let Mem::Device(gpu) = &mem {
        gpu.check_current_device()?;
    }
    let kind = if matches!(mem, Mem::Device(_)) { "device" } else { "host" };
    println!(
        "rank {rank}: all-reduce of {} bytes ({kind} memory) x {} verified, {:.3} ms/iter, median iteration {:.3} ms, bus bandwidth {:.2} GB/s",
        o.size,
        o.iters,
        secs * 1e3 / o.iters as f64,
        mid * 1e3,
        (2.0 * (n as f64 - 1.0) / n as f64) * o.size as f64 * o.iters as f64 / secs / 1e9
    );
    Ok(())
}

/// `--pin`: the CPU set of rank `rank`, the rank-th CPU this process may run on (modulo their
/// number), for the rank's process from its exec on — its NIC's progress thread and the
/// preload's threads too. The bench's all-reduce rows (benches/rescue.rs) use it: unpinned, a
/// run settles into one of several schedules of two ranks and their NICs' threads on two cores
/// and differs by up to 2x for its whole length.
fn cpu_of_rank(rank: usize) -> Result<libc::cpu_set_t, String> {
    // SAFETY: a cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: this process (0), the size of `set`, which the kernel fills.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(format!("sched_getaffinity: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: CPU_ISSET reads the set in place; callers pass i < CPU_SETSIZE.
    let is_set = |i: usize| unsafe { libc::CPU_ISSET(i, &set) };
    let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize).filter(|&i| is_set(i)).collect();
    let cpu = *allowed.get(rank % allowed.len().max(1)).ok_or("no CPU to run on")?;
    // SAFETY: as above.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE (it came from the set above).
    unsafe { libc::CPU_SET(cpu, &mut one) };
    Ok(one)
}

/// A barrier among the ranks of this host: one shared mapping of a file in the rendezvous
/// directory, one epoch slot per rank. Creating files per barrier (the first version) made small
/// all-reduces measure ext4's directory lock instead of RDMA.
struct Barrier {
    slots: *const std::sync::atomic::AtomicU64,
    n: usize,
    rank: usize,
    epoch: u64,
}

impl Barrier {
    fn open(dir: &Path, rank: usize, n: usize) -> Result<Barrier, String> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("barrier"))
            .map_err(|e| format!("barrier file: {e}"))?;
        let len = 8 * n;
        // Every rank sets the same length: ftruncate to the current size changes nothing.
        f.set_len(len as u64).map_err(|e| format!("barrier file: {e}"))?;
        // SAFETY: a shared read-write mapping of a file we hold open, len bytes long; kept for
        // the life of the process (never unmapped), so the slot pointer stays valid.
        let p = unsafe {
            libc::mmap(null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0)
        };
        if p == libc::MAP_FAILED {
            return Err(format!("barrier mmap: {}", std::io::Error::last_os_error()));
        }
        let b = Barrier { slots: p.cast(), n, rank, epoch: 0 };
        // A directory reused from an earlier job may hold its epochs: this rank's slot starts
        // over before it says it is ready, and nobody waits on it before everyone is.
        b.slot(rank).store(0, std::sync::atomic::Ordering::Release);
        Ok(b)
    }

    fn slot(&self, r: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(r < self.n);
        // SAFETY: r < n (checked); the mapping holds n page-aligned u64 slots and lives as long
        // as the process.
        unsafe { &*self.slots.add(r) }
    }

    /// Every rank calls wait() the same number of times; the i-th call returns once all ranks
    /// made their i-th.
    fn wait(&mut self) -> Result<(), String> {
        use std::sync::atomic::Ordering::{Acquire, Release};
        self.epoch += 1;
        self.slot(self.rank).store(self.epoch, Release);
        let t = Instant::now();
        for r in 0..self.n {
            let mut tries = 0u32;
            while self.slot(r).load(Acquire) < self.epoch {
                if t.elapsed() > Duration::from_secs(120) {
                    return Err(format!("barrier {}: rank {r} missing", self.epoch));
                }
                // Yield first (a peer a few µs behind is the common case), then sleep so that
                // many ranks on few cores do not starve each other.
                tries += 1;
                if tries < 1000 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
        Ok(())
    }
}

fn env_usize(k: &str) -> Option<usize> {
    std::env::var(k).ok()?.parse().ok()
}

fn main() -> ExitCode {
    let o = match opts() {
        Ok(o) => o,
        Err(e) => {
            say(&format!("allreduce: {e}"));
            return ExitCode::from(2);
        }
    };
    // One rank of an mpirun job, or of our own launcher.
    let as_rank = env_usize("MRSHIM_DEMO_RANK")
        .map(|r| (r, env_usize("MRSHIM_DEMO_NRANKS").unwrap_or(1)))
        .or_else(|| env_usize("OMPI_COMM_WORLD_RANK").map(|r| (r, env_usize("OMPI_COMM_WORLD_SIZE").unwrap_or(1))));
    if let Some((rank, n)) = as_rank {
        let dir = o
            .rundir
            .clone()
            .or_else(|| std::env::var_os("MRSHIM_DEMO_RUNDIR").map(PathBuf::from))
            .unwrap_or_else(|| std::env::temp_dir().join("mrshim-allreduce"));
        let _ = std::fs::create_dir_all(&dir);
        return match run_rank(&o, rank, n, &dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                say(&format!("rank {rank}: all-reduce failed: {e}"));
                ExitCode::from(1)
            }
        };
    }
    let dir = o
        .rundir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("mrshim-allreduce-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..o.ranks)
        .map(|r| {
            let mut c = std::process::Command::new(&exe);
            c.args(std::env::args_os().skip(1))
                .env("MRSHIM_DEMO_RANK", r.to_string())
                .env("MRSHIM_DEMO_NRANKS", o.ranks.to_string())
                .env("MRSHIM_DEMO_RUNDIR", &dir)
                .env("RANK", r.to_string());
            if o.pin {
                let set = cpu_of_rank(r).unwrap_or_else(|e| panic!("--pin: {e}"));
                use std::os::unix::process::CommandExt;
                // Between fork and exec the child makes one system call, on a set computed
                // before the fork: no allocation, no lock.
                // SAFETY: as just said.
                unsafe {
                    c.pre_exec(move || {
                        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    })
                };
            }
            c.spawn().expect("spawn rank")
        })
        .collect();
    let mut failed = 0;
    for mut c in children {
        if !c.wait().map(|s| s.success()).unwrap_or(false) {
            failed += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if failed > 0 {
        say(&format!("all-reduce: {failed} of {} ranks failed", o.ranks));
        ExitCode::from(1)
    } else {
        println!("all-reduce: {} ranks, {} bytes, {} iterations: OK", o.ranks, o.size, o.iters);
        ExitCode::SUCCESS
    }
}

//! Baseline numbers for the simulated device, so the shim's overhead ratios have something to
//! stand on: registration cost (reg + dereg) and RDMA WRITE bandwidth between two QPs, 4 KiB to
//! 4 MiB. `cargo bench -p mrshim-sim`. Prints a table; asserts nothing.

use ibverbs::api::*;
use ibverbs::qp::*;
use mrshim_verbs as v;
use std::ptr::null_mut;
use std::time::Instant;

const FULL: i32 = 0xf;

struct End {
    cq: *mut v::ibv_cq,
    qp: *mut v::ibv_qp,
    mr: *mut v::ibv_mr,
    buf: Vec<u8>,
}

/// # Safety
/// `ctx` and `pd` are an open device context and a protection domain of it.
unsafe fn end(ctx: *mut v::ibv_context, pd: *mut v::ibv_pd, size: usize) -> End {
    let mut buf = vec![1u8; size];
    // SAFETY: per the contract; buf outlives its MR (both in the returned End).
    unsafe {
        let cq = ibv_create_cq(ctx, 256, null_mut(), null_mut(), 0);
        let qp = ibv_create_qp(pd, &mut rc_init_attr(cq, 64));
        let mr = ibv_reg_mr_iova2(pd, buf.as_mut_ptr().cast(), size, buf.as_ptr() as u64, FULL as u32);
        assert!(!qp.is_null() && !mr.is_null());
        End { cq, qp, mr, buf }
    }
}

/// # Safety
/// `ctx` is an open device context and `a` a QP of it.
unsafe fn connect(ctx: *mut v::ibv_context, a: *mut v::ibv_qp, dest: u32) {
    use v::rc;
    // SAFETY: per the contract; the GID is ours, zeroed (valid for the C union) before use.
    let gid = unsafe {
        let mut gid: v::ibv_gid = std::mem::zeroed();
        ibv_query_gid(ctx, 1, 3, &mut gid);
        gid.raw
    };
    let rtr = rc::Rtr {
        ah_attr: rc::ah(1, 0, Some(rc::Grh { dgid: gid, sgid_index: 3, hop_limit: 0 })),
        path_mtu: 5,
        dest_qp_num: dest,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 0,
    };
    let rts = rc::Rts { sq_psn: 0, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1 };
    for (mut at, mask) in [rc::init(1, FULL as u32), rtr.attr(), rts.attr()] {
        // SAFETY: per the contract; the attribute struct is ours.
        assert_eq!(unsafe { ibv_modify_qp(a, &mut at, mask) }, 0);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("MRSHIM_SIM_RUNDIR", dir.path());
    // SAFETY: the verbs are called in the order the API requires, on objects created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        let ctx = ibv_open_device(*list);
        let pd = ibv_alloc_pd(ctx);

        println!("registration (reg + dereg), median of 9 batches:");
        for size in [4096usize, 1 << 20, 16 << 20] {
            let mut buf = vec![0u8; size];
            let n = if size > (1 << 20) { 200 } else { 2000 };
            let mut samples = Vec::new();
            for _ in 0..9 {
                let t = Instant::now();
                for _ in 0..n {
                    let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), size, FULL);
                    ibv_dereg_mr(mr);
                }
                samples.push(t.elapsed().as_nanos() as f64 / n as f64);
            }
            println!("  {:>9} B  {:>10.0} ns/registration", size, median(samples));
        }

        println!("RDMA WRITE bandwidth, one QP pair, 16 WRs in flight:");
        let max = 4 << 20;
        let a = end(ctx, pd, max);
        let b = end(ctx, pd, max);
        connect(ctx, a.qp, (*b.qp).qp_num);
        connect(ctx, b.qp, (*a.qp).qp_num);
        let post = (*ctx).ops.post_send.unwrap();
        let poll = (*ctx).ops.poll_cq.unwrap();
        let mut size = 4096usize;
        while size <= max {
            let iters = ((512usize << 20) / size).clamp(64, 20000);
            let mut sge = v::ibv_sge { addr: a.buf.as_ptr() as u64, length: size as u32, lkey: (*a.mr).lkey };
            let mut wr: v::ibv_send_wr = std::mem::zeroed();
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = v::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
            wr.send_flags = v::ibv_send_flags::IBV_SEND_SIGNALED.0;
            wr.wr.rdma.remote_addr = b.buf.as_ptr() as u64;
            wr.wr.rdma.rkey = (*b.mr).rkey;
            let (mut posted, mut done) = (0usize, 0usize);
            let mut wcs: [v::sys::ibv_wc; 16] = std::mem::zeroed();
            let t = Instant::now();
            while done < iters {
                while posted < iters && posted - done < 16 {
                    let mut bad = null_mut();
                    assert_eq!(post(a.qp, &mut wr, &mut bad), 0);
                    posted += 1;
                }
                let n = poll(a.cq, 16, wcs.as_mut_ptr());
                done += n.max(0) as usize;
            }
            let secs = t.elapsed().as_secs_f64();
            println!("  {:>9} B  {:>8.0} MB/s", size, (size * iters) as f64 / secs / 1e6);
            size *= 4;
        }
        let _ = (b.cq, a.cq);
        ibv_close_device(ctx);
    }
}

//! Versioned names. Functions listed in both IBVERBS_1.0 and IBVERBS_1.1 of libibverbs.map are
//! exported twice, `name@IBVERBS_1.0` and the default `name@@IBVERBS_1.1`, through two tail-jump
//! stubs (`.symver` must sit next to the symbol it renames, hence assembly). The 1.0 names serve
//! the same implementation: programs built before 2006 are not a target. The private provider
//! interface (IBVERBS_PRIVATE_34) is inert: the simulator loads no providers, but Debian's
//! libmlx5/libefa are linked with BIND_NOW and need the names to exist.

use crate::ah::*;
use crate::api::*;
use crate::misc::*;
use crate::qp::*;
use crate::srq::*;

/// The unconditional branch of this architecture, for the tail-jump stubs.
#[cfg(target_arch = "x86_64")]
macro_rules! tail_jump {
    () => {
        "jmp {f}"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! tail_jump {
    () => {
        "b {f}"
    };
}

macro_rules! dual_version {
    ($($name:ident),* $(,)?) => {$(
        core::arch::global_asm!(
            concat!(".globl __mrsim_", stringify!($name), "_1_0"),
            concat!(".type __mrsim_", stringify!($name), "_1_0,%function"),
            concat!("__mrsim_", stringify!($name), "_1_0:"),
            tail_jump!(),
            concat!(".symver __mrsim_", stringify!($name), "_1_0, ", stringify!($name), "@IBVERBS_1.0"),
            concat!(".globl __mrsim_", stringify!($name), "_1_1"),
            concat!(".type __mrsim_", stringify!($name), "_1_1,%function"),
            concat!("__mrsim_", stringify!($name), "_1_1:"),
            tail_jump!(),
            concat!(".symver __mrsim_", stringify!($name), "_1_1, ", stringify!($name), "@@IBVERBS_1.1"),
            f = sym $name,
        );
    )*};
}

dual_version!(
    ibv_ack_async_event,
    ibv_ack_cq_events,
    ibv_alloc_pd,
    ibv_attach_mcast,
    ibv_close_device,
    ibv_create_ah,
    ibv_create_cq,
    ibv_create_qp,
    ibv_create_srq,
    ibv_dealloc_pd,
    ibv_dereg_mr,
    ibv_destroy_ah,
    ibv_destroy_cq,
    ibv_destroy_qp,
    ibv_destroy_srq,
    ibv_detach_mcast,
    ibv_free_device_list,
    ibv_get_async_event,
    ibv_get_cq_event,
    ibv_get_device_guid,
    ibv_get_device_list,
    ibv_get_device_name,
    ibv_modify_qp,
    ibv_modify_srq,
    ibv_open_device,
    ibv_query_device,
    ibv_query_gid,
    ibv_query_pkey,
    ibv_query_port,
    ibv_query_qp,
    ibv_query_srq,
    ibv_reg_mr,
    ibv_resize_cq,
);

// Only a non-default version exists for this one in rdma-core.
core::arch::global_asm!(
    ".globl __mrsim_ibv_register_driver_1_1",
    ".type __mrsim_ibv_register_driver_1_1,%function",
    "__mrsim_ibv_register_driver_1_1:",
    tail_jump!(),
    ".symver __mrsim_ibv_register_driver_1_1, ibv_register_driver@IBVERBS_1.1",
    f = sym ibv_register_driver,
);

macro_rules! inert {
    ($ret:ty = $val:expr; $($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> $ret { $val }
    )*};
}

// Provider-side commands: every one fails as if the kernel did not know it.
inert!(std::os::raw::c_int = libc::EOPNOTSUPP;
    execute_ioctl, ibv_cmd_advise_mr, ibv_cmd_alloc_dm, ibv_cmd_alloc_mw, ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast, ibv_cmd_close_xrcd, ibv_cmd_create_ah, ibv_cmd_create_counters,
    ibv_cmd_create_cq, ibv_cmd_create_cq_ex, ibv_cmd_create_flow, ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp, ibv_cmd_create_qp_ex, ibv_cmd_create_qp_ex2, ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq, ibv_cmd_create_srq_ex, ibv_cmd_create_wq, ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd, ibv_cmd_dereg_mr, ibv_cmd_destroy_ah, ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq, ibv_cmd_destroy_flow, ibv_cmd_destroy_flow_action, ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table, ibv_cmd_destroy_srq, ibv_cmd_destroy_wq, ibv_cmd_detach_mcast,
    ibv_cmd_free_dm, ibv_cmd_get_context, ibv_cmd_modify_cq, ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp, ibv_cmd_modify_qp_ex, ibv_cmd_modify_srq, ibv_cmd_modify_wq, ibv_cmd_open_qp,
    ibv_cmd_open_xrcd, ibv_cmd_poll_cq, ibv_cmd_post_recv, ibv_cmd_post_send, ibv_cmd_post_srq_recv,
    ibv_cmd_query_context, ibv_cmd_query_device_any, ibv_cmd_query_mr, ibv_cmd_query_port,
    ibv_cmd_query_qp, ibv_cmd_query_srq, ibv_cmd_read_counters, ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr, ibv_cmd_reg_mr, ibv_cmd_req_notify_cq, ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq, verbs_init_cq,
);
inert!(std::os::raw::c_int = -1; ibv_read_ibdev_sysfs_file);
inert!(std::os::raw::c_uint = 0; __ioctl_final_num_attrs);
inert!(*mut std::os::raw::c_void = std::ptr::null_mut(); _verbs_init_and_alloc_context, verbs_open_device);
inert!(() = (); __verbs_log, verbs_register_driver_34, verbs_set_ops, verbs_uninit_context, verbs_allow_disassociate_destroy);

//! Simulated GPU memory meets the simulated NIC: dmabuf export + ibv_reg_dmabuf_mr, and
//! ibv_reg_mr on the device pointer, refused unless MRSHIM_SIM_PEER_MEMORY=on.
mod common;
use common::*;

fn prog() -> std::path::PathBuf {
    c_program("gpu_verbs", &["-libverbs"])
}

#[test]
fn dmabuf_export_registers_and_carries_rdma_while_reg_mr_is_refused() {
    let out = checks(&prog(), &[], &[]);
    assert_eq!(info(&out, "reg_dmabuf_mr"), "ok", "{out}");
    assert!(out.contains("ok dmabuf_write_visible_via_dtoh\n") && out.contains("ok dmabuf_read_sees_htod\n"), "{out}");
    assert_eq!(info(&out, "reg_mr"), "errno=22", "EINVAL without peer memory, like the seed");
}

#[test]
fn device_mem_errno_is_configurable() {
    let out = checks(&prog(), &[], &[("MRSHIM_SIM_DEVICE_MEM_ERRNO", "EFAULT")]);
    assert_eq!(info(&out, "reg_mr"), "errno=14");
}

#[test]
fn peer_memory_lets_rdma_reach_device_memory() {
    let out = checks(&prog(), &[], &[("MRSHIM_SIM_PEER_MEMORY", "on")]);
    assert_eq!(info(&out, "reg_mr"), "ok");
    assert!(out.contains("ok peer_write_visible_via_dtoh\n") && out.contains("ok peer_read_sees_htod\n"), "{out}");
}

#[test]
fn dmabuf_switch_off_refuses_the_exported_fd() {
    let out = checks(&prog(), &[], &[("MRSHIM_SIM_DMABUF", "off")]);
    assert_eq!(info(&out, "reg_dmabuf_mr"), "Operation not supported");
}

//! The simulated devices as programs see them outside libibverbs: the files of
//! `/sys/class/infiniband/<dev>/` and `/sys/class/infiniband_verbs/uverbsN/` that UCX, Open MPI,
//! hwloc and rdma-core's tools read. [`write`] puts them under any directory; `mrshim sim`
//! mounts them at /sys/class in a private mount namespace (the library exports
//! `mrshim_sim_write_sysfs` so the view is made from the same configuration the device uses).

use crate::device::{fmt_guid, Device, GidType, BOARD_ID, FW_VER, PCI_DEVICE, PCI_VENDOR, VENDOR_PART_ID};
use std::io;
use std::path::Path;

/// Character device numbers rdma-core's udev rules give /dev/infiniband/uverbsN (231:192+N).
pub const UVERBS_MAJOR: u32 = 231;
pub const UVERBS_MINOR_BASE: u32 = 192;

/// The network interface a RoCE GID names in `gid_attrs/ndevs` (UCX reads it to name the port).
/// It exists only in the network namespace of `mrshim sim` (not with `--no-netns`), which makes
/// it from these files.
pub fn netdev_name(dev: &Device) -> String {
    format!("mrsim{}", dev.index)
}

fn put(root: &Path, rel: &str, text: &str) -> io::Result<()> {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap())?;
    std::fs::write(p, format!("{text}\n"))
}

fn gid_text(g: &[u8; 16]) -> String {
    g.chunks(2).map(|w| format!("{:02x}{:02x}", w[0], w[1])).collect::<Vec<_>>().join(":")
}

/// Writes `class/infiniband/...` and `class/infiniband_verbs/...` under `root` (a stand-in
/// for /sys).
pub fn write(root: &Path, devices: &[&Device]) -> io::Result<()> {
    put(root, "class/infiniband_verbs/abi_version", "6")?;
    for d in devices {
        let ib = format!("class/infiniband/{}", d.spec.name);
        let port = d.port_attr();
        let files = [
            ("node_type", "1: CA".to_string()),
            ("node_guid", fmt_guid(d.node_guid)),
            ("sys_image_guid", fmt_guid(d.node_guid)),
            ("fw_ver", FW_VER.into()),
            ("hca_type", format!("MT{VENDOR_PART_ID}")),
            ("hw_rev", "0x0".into()),
            ("board_id", BOARD_ID.into()),
            ("node_desc", format!("mrshim-sim {}", d.spec.name)),
            ("ports/1/state", if d.spec.active { "4: ACTIVE" } else { "1: DOWN" }.into()),
            ("ports/1/phys_state", if d.spec.active { "5: LinkUp" } else { "3: Disabled" }.into()),
            ("ports/1/link_layer", if d.is_roce() { "Ethernet" } else { "InfiniBand" }.into()),
            ("ports/1/rate", if d.is_roce() { "400 Gb/sec (4X NDR)" } else { "200 Gb/sec (4X HDR)" }.into()),
            ("ports/1/lid", format!("{:#x}", d.lid)),
            ("ports/1/lid_mask_count", "0".into()),
            ("ports/1/sm_lid", format!("{:#x}", port.sm_lid)),
            ("ports/1/sm_sl", "0".into()),
            ("ports/1/cap_mask", format!("{:#010x}", port.port_cap_flags)),
            ("ports/1/pkeys/0", "0xffff".into()),
            ("device/vendor", PCI_VENDOR.into()),
            ("device/device", PCI_DEVICE.into()),
            ("device/subsystem_vendor", PCI_VENDOR.into()),
            ("device/subsystem_device", "0x0040".into()),
            ("device/class", if d.is_roce() { "0x020000" } else { "0x020700" }.into()),
            ("device/numa_node", "0".into()),
            ("device/local_cpulist", cpulist()),
            ("device/uevent", format!("DRIVER=mlx5_core\nPCI_SLOT_NAME={}", pci_slot(d))),
        ];
        for (rel, text) in files {
            put(root, &format!("{ib}/{rel}"), &text)?;
        }
        for (i, (gid, ty)) in d.gids.iter().enumerate() {
            put(root, &format!("{ib}/ports/1/gids/{i}"), &gid_text(gid))?;
            let t = match (d.is_roce(), ty) {
                (false, _) => "IB/RoCE v1",
                (true, GidType::IbRoceV1) => "IB/RoCE v1",
                (true, GidType::RoceV2) => "RoCE v2",
            };
            put(root, &format!("{ib}/ports/1/gid_attrs/types/{i}"), t)?;
            if d.is_roce() {
                put(root, &format!("{ib}/ports/1/gid_attrs/ndevs/{i}"), &netdev_name(d))?;
            }
        }
        // No device/net/<ifname> here: tools that see the directory ask `ip addr show <ifname>`
        // for its address (rdma-core's tests do), so only `mrshim sim`'s network namespace,
        // where the interface exists, adds the link.
        // The driver: a link whose name tools read (there is no mlx5_core in the kernel).
        let _ = std::fs::remove_file(root.join(format!("{ib}/device/driver")));
        std::os::unix::fs::symlink("/sys/bus/pci/drivers/mlx5_core", root.join(format!("{ib}/device/driver")))?;
        let uv = format!("class/infiniband_verbs/uverbs{}", d.index);
        put(root, &format!("{uv}/ibdev"), &d.spec.name)?;
        put(root, &format!("{uv}/abi_version"), "1")?;
        put(root, &format!("{uv}/dev"), &format!("{UVERBS_MAJOR}:{}", UVERBS_MINOR_BASE + d.index as u32))?;
        let _ = std::fs::remove_file(root.join(format!("{uv}/device")));
        std::os::unix::fs::symlink(
            format!("../../infiniband/{}/device", d.spec.name),
            root.join(format!("{uv}/device")),
        )?;
    }
    Ok(())
}

fn pci_slot(d: &Device) -> String {
    format!("0000:{:02x}:00.0", d.index + 1)
}

fn cpulist() -> String {
    match std::thread::available_parallelism().map(|n| n.get()) {
        Ok(1) | Err(_) => "0".into(),
        Ok(n) => format!("0-{}", n - 1),
    }
}

/// `int mrshim_sim_write_sysfs(const char *root)`: writes the view of the configured devices
/// (MRSHIM_SIM_DEVICES) under `root`. 0, or -1 with errno.
///
/// # Safety
/// `root` is a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn mrshim_sim_write_sysfs(root: *const std::os::raw::c_char) -> std::os::raw::c_int {
    crate::ffi(-1, || {
        let Ok(reg) = crate::objects::registry() else { return crate::errno_ret(libc::EINVAL, -1) };
        // SAFETY: as the caller guarantees.
        let root = unsafe { std::ffi::CStr::from_ptr(root) }.to_string_lossy().into_owned();
        let devs: Vec<&Device> = reg.devices.iter().map(|(d, _)| d).collect();
        match write(Path::new(&root), &devs) {
            Ok(()) => 0,
            Err(e) => crate::errno_ret(e.raw_os_error().unwrap_or(libc::EIO), -1),
        }
    })
}

/// Not rdma-core's: the run directory (MRSHIM_SIM_RUNDIR) where this simulator's QPs and the
/// simulated librdmacm's ids meet, so both take it from the same configuration. NULL with errno
/// EINVAL when the configuration is invalid (it was reported then).
#[no_mangle]
pub extern "C" fn mrshim_sim_rundir() -> *const std::os::raw::c_char {
    static DIR: std::sync::OnceLock<Option<std::ffi::CString>> = std::sync::OnceLock::new();
    crate::ffi(std::ptr::null(), || {
        let dir = DIR.get_or_init(|| {
            let reg = crate::objects::registry().ok()?;
            std::ffi::CString::new(reg.config.rundir.clone()).ok()
        });
        match dir {
            Some(d) => d.as_ptr(),
            None => crate::errno_ret(libc::EINVAL, std::ptr::null()),
        }
    })
}

/// Not rdma-core's: the simulated librdmacm calls it around a disconnect (the DREQ/DREP it
/// sends or receives, a peer that exited) so that the CM message keeps its place among the
/// packets between the two ports (`Engine::fence`). 0, or -1 with errno ETIMEDOUT when the
/// context's NIC did not answer in time (the caller goes on: a lost ACK is then possible again).
///
/// # Safety
/// `ctx` is a context this library opened and has not closed.
#[no_mangle]
pub unsafe extern "C" fn mrshim_sim_fence(ctx: *mut mrshim_verbs::ibv_context) -> std::os::raw::c_int {
    crate::ffi(-1, || {
        if ctx.is_null() {
            return crate::errno_ret(libc::EINVAL, -1);
        }
        // SAFETY: as the caller guarantees.
        if unsafe { crate::objects::ctx(ctx) }.engine.fence() {
            0
        } else {
            crate::errno_ret(libc::ETIMEDOUT, -1)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_devices;

    #[test]
    fn roce_device_files_ucx_and_open_mpi_read() {
        let dir = tempfile::tempdir().unwrap();
        let specs = parse_devices("mlx5_0:roce,mlx5_1:ib").unwrap();
        let a = Device::new(0, specs[0].clone());
        let b = Device::new(1, specs[1].clone());
        write(dir.path(), &[&a, &b]).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert_eq!(read("class/infiniband/mlx5_0/ports/1/gid_attrs/types/3"), "RoCE v2\n");
        assert_eq!(read("class/infiniband/mlx5_0/ports/1/gids/3"), "0000:0000:0000:0000:0000:ffff:c000:020a\n");
        assert_eq!(read("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/3"), "mrsim0\n");
        assert_eq!(read("class/infiniband/mlx5_0/node_guid"), "b8ce:f603:00a1:b200\n");
        assert_eq!(read("class/infiniband/mlx5_0/device/vendor"), "0x15b3\n");
        assert_eq!(read("class/infiniband/mlx5_1/ports/1/link_layer"), "InfiniBand\n");
        assert_eq!(read("class/infiniband_verbs/uverbs1/ibdev"), "mlx5_1\n");
        assert_eq!(read("class/infiniband_verbs/uverbs1/dev"), "231:193\n");
        let drv = std::fs::read_link(dir.path().join("class/infiniband/mlx5_0/device/driver")).unwrap();
        assert_eq!(drv.file_name().unwrap(), "mlx5_core");
        assert!(!dir.path().join("class/infiniband/mlx5_0/device/net").exists());
        assert_eq!(read("class/infiniband_verbs/uverbs0/device/vendor"), "0x15b3\n");
        // Writing again (a second `mrshim sim` on the same directory) is fine.
        write(dir.path(), &[&a, &b]).unwrap();
    }
}

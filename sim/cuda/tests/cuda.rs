//! The simulated libcuda.so.1 through its C ABI: C programs dlopen it like NCCL does.
mod common;
use common::*;

fn prog() -> std::path::PathBuf {
    c_program("cudacheck", &["-lpthread"])
}

#[test]
fn errors_before_init_and_error_names() {
    checks(&prog(), &["preinit"], &[]);
}

#[test]
fn devices_names_pci_ids_attributes() {
    let out = checks(&prog(), &["devices"], &[]);
    assert_eq!(info(&out, "count"), "1");
    assert_eq!(info(&out, "name0"), "NVIDIA H100 (simulated 0)");
    assert_eq!(info(&out, "pci0"), "0000:20:00.0");
    assert_eq!(info(&out, "busattr0"), "20");
    assert_eq!(info(&out, "total0"), (16u64 << 30).to_string());

    let out = checks(&prog(), &["devices"], &[("MRSHIM_SIM_GPUS", "3"), ("MRSHIM_SIM_GPU_MEM", "512M")]);
    assert_eq!(info(&out, "count"), "3");
    assert_eq!(info(&out, "name2"), "NVIDIA H100 (simulated 2)");
    assert_eq!(info(&out, "pci2"), "0000:30:00.0");
    assert_eq!(info(&out, "total1"), (512u64 << 20).to_string());
}

#[test]
fn bad_environment_is_one_line_and_an_init_error() {
    for (var, val, accepted) in
        [("MRSHIM_SIM_GPUS", "lots", "from 0 to 16"), ("MRSHIM_SIM_GPU_MEM", "12X", "K, M or G suffix")]
    {
        let out = run(&prog(), &["init"], &[(var, val)]);
        let err = text(&out.stderr);
        let so = text(&out.stdout);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].contains(var) && lines[0].contains(&format!("\"{val}\"")) && lines[0].contains(accepted),
            "{err}"
        );
        assert_eq!(info(&so, "init"), "1", "CUDA_ERROR_INVALID_VALUE");
        assert_eq!(info(&so, "init_again"), "1");
        assert_eq!(info(&so, "count"), "3", "CUDA_ERROR_NOT_INITIALIZED");
    }
    let out = run(&prog(), &["init"], &[("MRSHIM_SIM_GPUS", "0")]);
    let so = text(&out.stdout);
    assert_eq!(info(&so, "init"), "100", "CUDA_ERROR_NO_DEVICE");
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn contexts_current_stack_and_primary() {
    checks(&prog(), &["contexts"], &[]);
}

#[test]
fn allocation_copies_memset_bounds_and_accounting() {
    let out = checks(&prog(), &["memory"], &[("MRSHIM_SIM_GPU_MEM", "64M")]);
    assert!(out.contains("info total=67108864 free=67108864"), "{out}");
}

#[test]
fn pointer_attributes() {
    checks(&prog(), &["attrs"], &[]);
}

#[test]
fn device_memory_faults_on_the_cpu_but_copies_round_trip() {
    let out = checks(&prog(), &["fault"], &[]);
    assert!(
        out.contains("ok cpu_read_faults\n")
            && out.contains("ok cpu_write_faults\n")
            && out.contains("ok copy_roundtrip_exact\n"),
        "{out}"
    );
}

#[test]
fn streams_in_order_busy_stream_and_non_blocking_stream() {
    let out = checks(&prog(), &["streams"], &[]);
    assert!(out.contains("ok nonblocking_not_delayed_by_busy_stream"), "{out}");
}

#[test]
fn threads_bind_contexts_and_streams_independently() {
    checks(&prog(), &["threads"], &[]);
}

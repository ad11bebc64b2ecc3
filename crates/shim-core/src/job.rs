//! The job a process belongs to, read from its launcher's environment: job id, world size,
//! launcher, and the communication-library settings the job ran with. Written once, in the
//! config record (docs/record-schema.md), so `mrshim analyze` can tell jobs and their settings
//! apart; `%j` in MRSHIM_LOG is the job id.

use std::collections::BTreeMap;

/// Job id variables, first set wins: batch systems before the MPI runtime's own id.
pub const JOB_ID_VARS: &[&str] =
    &["SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"];

/// World size variables, first one holding a non-negative integer wins.
pub const WORLD_SIZE_VARS: &[&str] =
    &["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "FLUX_JOB_SIZE", "SLURM_NTASKS", "WORLD_SIZE"];

/// Launchers, each recognised by a variable it sets for every rank (first match). Open MPI's
/// comes before Slurm's: ranks that mpirun starts inside an allocation inherit SLURM_PROCID.
pub const LAUNCHERS: &[(&str, &str)] = &[
    ("OMPI_COMM_WORLD_RANK", "openmpi"),
    ("MV2_COMM_WORLD_RANK", "mvapich"),
    ("FLUX_TASK_RANK", "flux"),
    ("PALS_RANKID", "pals"),
    ("SLURM_PROCID", "slurm"),
    ("PMIX_RANK", "pmix"),
    ("PMI_RANK", "pmi"),
    ("TORCHELASTIC_RUN_ID", "torchrun"),
];

/// Library settings echoed as the job set them: every variable with one of these prefixes...
pub const KNOB_PREFIXES: &[&str] = &["NCCL_", "MCCL_", "RCCL_", "UCX_", "FI_"];
/// ... and these.
pub const KNOB_NAMES: &[&str] = &["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Job {
    /// The id and the variable it came from.
    pub id: Option<(String, &'static str)>,
    pub world_size: Option<(i64, &'static str)>,
    pub launcher: Option<&'static str>,
    /// The library settings (KNOB_PREFIXES, KNOB_NAMES) as set.
    pub knobs: BTreeMap<String, String>,
}

impl Job {
    /// `get` reads one variable; `names` are the names of all variables set (the knobs are
    /// found by prefix).
    pub fn from_env(get: &impl Fn(&str) -> Option<String>, names: impl IntoIterator<Item = String>) -> Job {
        let id = JOB_ID_VARS.iter().find_map(|v| {
            let s = get(v)?;
            let s = s.trim();
            (!s.is_empty()).then(|| (s.to_string(), *v))
        });
        let knobs = names
            .into_iter()
            .filter(|n| KNOB_PREFIXES.iter().any(|p| n.starts_with(p)) || KNOB_NAMES.contains(&n.as_str()))
            .filter_map(|n| get(&n).map(|v| (n, v)))
            .collect();
        Job {
            id,
            world_size: crate::ident::first_int(WORLD_SIZE_VARS, get),
            launcher: LAUNCHERS.iter().find(|(v, _)| get(v).is_some()).map(|(_, l)| *l),
            knobs,
        }
    }

    /// For `%j`: the id with every character outside [A-Za-z0-9._-] replaced by `_` (PBS ids
    /// carry a host name, PMIx namespaces an `@`); `nojob` without one.
    pub fn file_name_id(&self) -> String {
        match &self.id {
            Some((id, _)) => id
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
                .collect(),
            None => "nojob".into(),
        }
    }
}

/// The names of all variables of this process's environment (for [`Job::from_env`]).
pub fn env_names() -> impl Iterator<Item = String> {
    std::env::vars_os().filter_map(|(k, _)| k.into_string().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn job(v: &[(&str, &str)]) -> Job {
        let m: HashMap<String, String> = v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        Job::from_env(&|k: &str| m.get(k).cloned(), m.keys().cloned())
    }

    #[test]
    fn slurm_step() {
        let j = job(&[
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "16"),
            ("NCCL_IB_HCA", "mlx5_0"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("HOME", "/root"),
            ("NCCLX", "not a knob"),
        ]);
        assert_eq!(j.id, Some(("4242".into(), "SLURM_JOB_ID")));
        assert_eq!(j.world_size, Some((16, "SLURM_NTASKS")));
        assert_eq!(j.launcher, Some("slurm"));
        assert_eq!(j.knobs.keys().collect::<Vec<_>>(), ["CUDA_VISIBLE_DEVICES", "NCCL_IB_HCA"]);
    }

    #[test]
    fn mpirun_inside_an_allocation_is_open_mpi() {
        let j = job(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_PROCID", "0"),
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_MCA_ess_base_jobid", "114819073"),
            ("UCX_TLS", "rc"),
        ]);
        assert_eq!(j.id, Some(("7".into(), "SLURM_JOB_ID")), "the batch job's id first");
        assert_eq!(j.world_size, Some((8, "OMPI_COMM_WORLD_SIZE")));
        assert_eq!(j.launcher, Some("openmpi"));
        assert_eq!(j.knobs.get("UCX_TLS").map(String::as_str), Some("rc"));
    }

    #[test]
    fn bare_mpirun_flux_and_nothing() {
        assert_eq!(job(&[("PMIX_NAMESPACE", "prterun-n1-77@1")]).file_name_id(), "prterun-n1-77_1");
        let f = job(&[("FLUX_JOB_ID", "ƒ2Xk"), ("FLUX_TASK_RANK", "1"), ("FLUX_JOB_SIZE", "4")]);
        assert_eq!((f.launcher, f.world_size), (Some("flux"), Some((4, "FLUX_JOB_SIZE"))));
        assert_eq!(f.file_name_id(), "_2Xk");
        let none = job(&[]);
        assert_eq!(none, Job::default());
        assert_eq!(none.file_name_id(), "nojob");
        assert_eq!(job(&[("PBS_JOBID", "123.pbs-server")]).file_name_id(), "123.pbs-server");
    }
}

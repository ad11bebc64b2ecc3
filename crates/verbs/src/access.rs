//! `enum ibv_access_flags` bits by name: the shared table of mrshim-access, whose values the
//! tests below check against rdma-core's headers (bindgen).

pub use mrshim_access::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ibv_access_flags as F;

    #[test]
    fn the_shared_table_is_rdma_cores_abi() {
        let abi = [
            (LOCAL_WRITE, F::IBV_ACCESS_LOCAL_WRITE.0),
            (REMOTE_WRITE, F::IBV_ACCESS_REMOTE_WRITE.0),
            (REMOTE_READ, F::IBV_ACCESS_REMOTE_READ.0),
            (REMOTE_ATOMIC, F::IBV_ACCESS_REMOTE_ATOMIC.0),
            (MW_BIND, F::IBV_ACCESS_MW_BIND.0),
            (ZERO_BASED, F::IBV_ACCESS_ZERO_BASED.0),
            (ON_DEMAND, F::IBV_ACCESS_ON_DEMAND.0),
            (HUGETLB, F::IBV_ACCESS_HUGETLB.0),
            (FLUSH_GLOBAL, F::IBV_ACCESS_FLUSH_GLOBAL.0),
            (FLUSH_PERSISTENT, F::IBV_ACCESS_FLUSH_PERSISTENT.0),
            (RELAXED_ORDERING, F::IBV_ACCESS_RELAXED_ORDERING.0),
        ];
        for (ours, theirs) in abi {
            assert_eq!(ours, theirs, "{}", describe(ours));
        }
        assert_eq!(NAMES.len(), abi.len());
        let (first, last) =
            (crate::extra_consts::IB_UVERBS_ACCESS_OPTIONAL_FIRST, crate::extra_consts::IB_UVERBS_ACCESS_OPTIONAL_LAST);
        assert_eq!(OPTIONAL_RANGE, ((last << 1) - 1) & !(first - 1));
    }
}

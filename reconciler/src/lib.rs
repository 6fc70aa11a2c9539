//! The NodeWright GitOps reconciler: Git source, lifecycle engine, simulated cluster, cluster
//! adapters, status write-back and the `nodewright` command line.

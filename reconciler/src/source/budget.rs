//! What reading one commit or folder of manifests may cost: each budget, the flag that raises
//! it, and the flags themselves, shared by every command that reads a repository or a folder
//! (`run`, `diff`, `validate`, `simulate --repo`). A budget failure names the budget and its
//! flag, so whoever meets it knows what was refused and how to let it through.

use std::fmt;

use serde::Serialize;

use super::desired::ReadOptions;
use super::manifests::Limits;
use super::tree::TreeLimits;

/// One budget of a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Budget {
    /// Bytes of one manifest file.
    FileBytes,
    /// Manifest files of one commit or folder.
    Files,
    /// Bytes of all manifest files of one commit or folder together.
    TotalBytes,
    /// Tree entries looked at while walking one commit.
    TreeEntries,
    /// YAML documents of one commit or folder.
    Documents,
    /// YAML nodes one document expands to, aliases included.
    YamlNodes,
    /// Scalar bytes one document expands to, aliases included.
    YamlExpandedBytes,
    /// `[`/`{` nesting of one document.
    YamlNesting,
}

impl Budget {
    /// The command-line flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Budget::FileBytes => "--max-file-bytes",
            Budget::Files => "--max-files",
            Budget::TotalBytes => "--max-total-bytes",
            Budget::TreeEntries => "--max-tree-entries",
            Budget::Documents => "--max-documents",
            Budget::YamlNodes => "--max-yaml-nodes",
            Budget::YamlExpandedBytes => "--max-yaml-expanded-bytes",
            Budget::YamlNesting => "--max-yaml-nesting",
        }
    }

    /// What it counts, as a plural noun phrase (`more than 10000 manifest files`).
    pub fn counts(self) -> &'static str {
        match self {
            Budget::FileBytes => "bytes in one manifest file",
            Budget::Files => "manifest files",
            Budget::TotalBytes => "bytes of manifest files",
            Budget::TreeEntries => "tree entries",
            Budget::Documents => "YAML documents",
            Budget::YamlNodes => "YAML nodes in one document",
            Budget::YamlExpandedBytes => "bytes of scalars in one expanded document",
            Budget::YamlNesting => "levels of flow nesting in one document",
        }
    }
}

/// `--max-… raises it`, the tail of every budget failure.
impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} raises this limit", self.flag())
    }
}

/// The parser refuses deeper nesting itself (after superlinear work), so the flag stops below.
pub const MAX_YAML_NESTING_CEILING: usize = 100;

/// The budget flags of the commands that read manifests.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct BudgetArgs {
    /// Largest manifest file accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_file_bytes)]
    pub max_file_bytes: usize,
    /// Most manifest files in one commit or folder.
    #[arg(long, value_name = "N", default_value_t = TreeLimits::default().max_files)]
    pub max_files: usize,
    /// Most bytes of manifest files in one commit or folder together (a file named by several
    /// paths counts once per path).
    #[arg(long, value_name = "BYTES", default_value_t = TreeLimits::default().max_total_bytes)]
    pub max_total_bytes: u64,
    /// Most Git tree entries looked at while reading one commit (a subtree counts each time
    /// a path leads to it).
    #[arg(long, value_name = "N", default_value_t = TreeLimits::default().max_entries)]
    pub max_tree_entries: usize,
    /// Most YAML documents in one commit or folder.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_documents)]
    pub max_documents: usize,
    /// Most YAML nodes one document may expand to, aliases included.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_nodes_per_document)]
    pub max_yaml_nodes: usize,
    /// Most scalar bytes one document may expand to, aliases included.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_expanded_bytes_per_document)]
    pub max_yaml_expanded_bytes: usize,
    /// Deepest `[`/`{` nesting of one document (at most 100).
    #[arg(
        long,
        value_name = "N",
        default_value_t = Limits::default().max_flow_nesting,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_YAML_NESTING_CEILING as u64)
    )]
    pub max_yaml_nesting: usize,
}

impl Default for BudgetArgs {
    fn default() -> Self {
        let (tree, load) = (TreeLimits::default(), Limits::default());
        BudgetArgs {
            max_file_bytes: load.max_file_bytes,
            max_files: tree.max_files,
            max_total_bytes: tree.max_total_bytes,
            max_tree_entries: tree.max_entries,
            max_documents: load.max_documents,
            max_yaml_nodes: load.max_nodes_per_document,
            max_yaml_expanded_bytes: load.max_expanded_bytes_per_document,
            max_yaml_nesting: load.max_flow_nesting,
        }
    }
}

impl BudgetArgs {
    /// The budgets of a commit's tree walk.
    pub fn tree(&self) -> TreeLimits {
        TreeLimits {
            max_file_bytes: self.max_file_bytes as u64,
            max_files: self.max_files,
            max_total_bytes: self.max_total_bytes,
            max_entries: self.max_tree_entries,
            ..TreeLimits::default()
        }
    }

    /// How to read the manifests under `root` of a commit within these budgets.
    pub fn read_options(&self, root: &str) -> ReadOptions {
        ReadOptions {
            root: root.to_owned(),
            tree: self.tree(),
            load: self.load(),
            signatures: None,
        }
    }

    /// The budgets of loading files (a commit's, or a folder's).
    pub fn load(&self) -> Limits {
        Limits {
            max_file_bytes: self.max_file_bytes,
            max_files: self.max_files,
            max_total_bytes: self.max_total_bytes,
            max_documents: self.max_documents,
            max_nodes_per_document: self.max_yaml_nodes,
            max_expanded_bytes_per_document: self.max_yaml_expanded_bytes,
            max_flow_nesting: self.max_yaml_nesting,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        budgets: BudgetArgs,
    }

    #[test]
    fn every_flag_sets_the_budget_it_names() {
        let budgets = Command::try_parse_from([
            "nodewright",
            "--max-file-bytes=1",
            "--max-files=2",
            "--max-total-bytes=3",
            "--max-tree-entries=4",
            "--max-documents=5",
            "--max-yaml-nodes=6",
            "--max-yaml-expanded-bytes=7",
            "--max-yaml-nesting=8",
        ])
        .unwrap()
        .budgets;
        let (tree, load) = (budgets.tree(), budgets.load());
        let set = [
            (Budget::FileBytes, load.max_file_bytes as u64),
            (Budget::FileBytes, tree.max_file_bytes),
            (Budget::Files, load.max_files as u64),
            (Budget::Files, tree.max_files as u64),
            (Budget::TotalBytes, load.max_total_bytes),
            (Budget::TotalBytes, tree.max_total_bytes),
            (Budget::TreeEntries, tree.max_entries as u64),
            (Budget::Documents, load.max_documents as u64),
            (Budget::YamlNodes, load.max_nodes_per_document as u64),
            (
                Budget::YamlExpandedBytes,
                load.max_expanded_bytes_per_document as u64,
            ),
            (Budget::YamlNesting, load.max_flow_nesting as u64),
        ];
        let flags = [
            "--max-file-bytes",
            "--max-files",
            "--max-total-bytes",
            "--max-tree-entries",
            "--max-documents",
            "--max-yaml-nodes",
            "--max-yaml-expanded-bytes",
            "--max-yaml-nesting",
        ];
        for (budget, value) in set {
            let position = flags.iter().position(|f| *f == budget.flag()).unwrap();
            assert_eq!(
                value,
                position as u64 + 1,
                "{budget:?} comes from {}",
                budget.flag()
            );
        }
        assert_eq!(
            Command::try_parse_from(["nodewright"]).unwrap().budgets,
            BudgetArgs::default()
        );
        assert_eq!(BudgetArgs::default().tree(), TreeLimits::default());
        assert_eq!(BudgetArgs::default().load(), Limits::default());
    }
}

//! usbmon's files in the tree, as the kernel's `mon_bus_init` adds them
//! (`mon_text_add`, `mon_bin_add`, `mon_stat_add`): for each bus `N`,
//! `usb/usbmon/Ns` (statistics), `Nt` (the old text format, not for bus 0)
//! and `Nu` (text), and `dev/usbmonN` (binary); and the `usbmon` symlink
//! to `usb/usbmon` that debugfs users know from the mount's top.

use std::sync::Arc;

use super::binary::BinNode;
use super::stat::StatNode;
use super::text::{TextFormat, TextNode};
use super::UsbMon;
use crate::base::vfs::{NodeKind, Tree};

/// Add every bus's files of `usbmon` to `tree`.
pub fn install(usbmon: &Arc<UsbMon>, tree: &Tree) {
    let dir = "usb/usbmon";
    for bus in usbmon.bus_numbers() {
        tree.add(
            &format!("{dir}/{bus}s"),
            NodeKind::File(Arc::new(StatNode::new(usbmon.clone(), bus))),
            0o600,
        );
        if bus != 0 {
            tree.add(
                &format!("{dir}/{bus}t"),
                NodeKind::File(Arc::new(TextNode::new(usbmon.clone(), bus, TextFormat::T))),
                0o600,
            );
        }
        tree.add(
            &format!("{dir}/{bus}u"),
            NodeKind::File(Arc::new(TextNode::new(usbmon.clone(), bus, TextFormat::U))),
            0o600,
        );
    }
    for bus in usbmon.bus_numbers() {
        tree.add(
            &format!("dev/usbmon{bus}"),
            NodeKind::File(Arc::new(BinNode::new(usbmon.clone(), bus))),
            0o600,
        );
    }
    tree.add("usbmon", NodeKind::Symlink("usb/usbmon".into()), 0o777);
}

//! usbmon, modelled on the kernel's `drivers/usb/mon`: a small core that fans
//! events out to readers (this file, like `mon_main.c`), and one file per
//! interface: [`text`] (`mon_text.c`), [`binary`] (`mon_bin.c`: the
//! `/dev/usbmonN` reads, ioctls and mmap), [`stat`] (`mon_stat.c`). Beside
//! them: [`event`], the URB event the simulators produce; [`header`], the
//! 48/64-byte binary format (shared with capture files); [`ring`], the
//! binary reader's ring buffer; [`files`], the files it adds to the tree.

pub mod binary;
pub mod event;
pub mod files;
pub mod header;
pub mod ring;
pub mod stat;
pub mod text;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::base::sync::RwLockExt;
use event::{UrbEvent, UrbSink};

/// A reader attached to a bus: a text or binary open file.
pub trait MonReader: Send + Sync {
    /// An event on the bus. Called with no locks of the bus held.
    fn event(&self, ev: &Arc<UrbEvent>);
}

/// One bus as usbmon sees it (bus 0 is the pseudo bus of all buses).
pub struct MonBus {
    /// The bus number.
    pub num: u16,
    readers: RwLock<Vec<(u64, Arc<dyn MonReader>)>>,
    /// Submit, complete and error callbacks seen while monitored.
    events: AtomicU32,
    /// Events text readers of this bus dropped because their queue was full.
    text_lost: AtomicU32,
}

impl MonBus {
    fn new(num: u16) -> Self {
        MonBus {
            num,
            readers: RwLock::new(Vec::new()),
            events: AtomicU32::new(0),
            text_lost: AtomicU32::new(0),
        }
    }

    /// Readers currently attached (text and binary).
    pub fn nreaders(&self) -> usize {
        self.readers.read_ok().len()
    }

    /// Events seen while monitored.
    pub fn events(&self) -> u32 {
        self.events.load(Ordering::Relaxed)
    }

    /// Events lost by text readers.
    pub fn text_lost(&self) -> u32 {
        self.text_lost.load(Ordering::Relaxed)
    }

    /// Count one event lost by a text reader of this bus.
    pub fn count_text_lost(&self) {
        self.text_lost.fetch_add(1, Ordering::Relaxed);
    }

    fn deliver(&self, ev: &Arc<UrbEvent>) {
        let readers = self.readers.read_ok();
        if readers.is_empty() {
            return;
        }
        self.events.fetch_add(1, Ordering::Relaxed);
        for (_, r) in readers.iter() {
            r.event(ev);
        }
    }
}

/// The usbmon facility: buses and their readers.
pub struct UsbMon {
    buses: BTreeMap<u16, Arc<MonBus>>,
    next_reader: AtomicU64,
}

/// A registration handle; dropping it detaches the reader.
pub struct Registration {
    bus: Arc<MonBus>,
    id: u64,
}

impl Registration {
    /// The bus the reader is attached to.
    pub fn bus(&self) -> &Arc<MonBus> {
        &self.bus
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.bus.readers.write_ok().retain(|(id, _)| *id != self.id);
    }
}

impl UsbMon {
    /// usbmon for the given buses (bus 0 is always there).
    pub fn new(bus_numbers: &[u16]) -> Self {
        let mut buses = BTreeMap::new();
        buses.insert(0, Arc::new(MonBus::new(0)));
        for &n in bus_numbers {
            buses.insert(n, Arc::new(MonBus::new(n)));
        }
        UsbMon {
            buses,
            next_reader: AtomicU64::new(1),
        }
    }

    /// Bus numbers, 0 first.
    pub fn bus_numbers(&self) -> Vec<u16> {
        self.buses.keys().copied().collect()
    }

    /// The bus with this number.
    pub fn bus(&self, num: u16) -> Option<Arc<MonBus>> {
        self.buses.get(&num).cloned()
    }

    /// Attach a reader to a bus; it sees events from now on.
    pub fn attach(&self, bus: u16, reader: Arc<dyn MonReader>) -> Option<Registration> {
        let b = self.bus(bus)?;
        let id = self.next_reader.fetch_add(1, Ordering::Relaxed);
        b.readers.write_ok().push((id, reader));
        Some(Registration { bus: b, id })
    }
}

/// Readers see events in the order they are delivered here: put an
/// [`event::Ordered`] in front when several threads deliver.
impl UrbSink for UsbMon {
    fn urb_event(&self, ev: UrbEvent) {
        let ev = Arc::new(ev);
        if let Some(b) = self.buses.get(&ev.bus) {
            b.deliver(&ev);
        }
        self.buses[&0].deliver(&ev);
    }
    fn wanted(&self, bus: u16) -> bool {
        self.buses[&0].nreaders() > 0 || self.buses.get(&bus).is_some_and(|b| b.nreaders() > 0)
    }
}

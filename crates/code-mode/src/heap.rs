//! A metered QuickJS heap: every allocation of a runtime is counted, so an interrupt
//! handler can stop a program at its memory limit before QuickJS's own allocator limit is
//! reached. QuickJS handles a failed allocation well in most places but not all (building
//! an error's stack trace right at the limit can dereference what it failed to allocate),
//! so the configured limit is enforced at interrupt points while the allocator limit sits
//! one limit (at least 16 MiB) higher, as a backstop with room to unwind.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rquickjs::Runtime;
use rquickjs::allocator::{Allocator, RustAllocator};

/// Room between the metered limit and the allocator's hard limit, at least.
const MIN_HEADROOM: usize = 16 * 1024 * 1024;

/// The live byte count of one runtime's heap, against its limit.
#[derive(Clone, Debug)]
pub struct Heap {
    used: Arc<AtomicUsize>,
    limit: usize,
}

impl Heap {
    /// Bytes the runtime holds now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether the runtime holds more than its limit: call it from the interrupt handler
    /// (and when classifying a failure) to stop the program with a memory error.
    pub fn over(&self) -> bool {
        self.used() > self.limit
    }
}

/// A runtime whose heap is metered against `limit` bytes (see the module docs).
pub fn metered_runtime(limit: usize) -> rquickjs::Result<(Runtime, Heap)> {
    let used = Arc::new(AtomicUsize::new(0));
    let runtime = Runtime::new_with_alloc(Counting {
        inner: RustAllocator,
        used: used.clone(),
    })?;
    runtime.set_memory_limit(limit.saturating_add(limit.max(MIN_HEADROOM)));
    Ok((runtime, Heap { used, limit }))
}

/// [`RustAllocator`] with a running total of the usable bytes it has handed out.
struct Counting {
    inner: RustAllocator,
    used: Arc<AtomicUsize>,
}

impl Counting {
    fn add(&self, ptr: *mut u8) {
        if !ptr.is_null() {
            self.used.fetch_add(size_of(ptr), Ordering::Relaxed);
        }
    }
}

#[allow(unsafe_code)]
fn size_of(ptr: *mut u8) -> usize {
    // SAFETY: only called with non-null pointers this allocator returned and has not freed.
    unsafe { RustAllocator::usable_size(ptr) }
}

// SAFETY: every call is forwarded to `RustAllocator`, which upholds the trait's contract;
// the wrapper only reads the usable size of live allocations to keep its count, and handles
// the null and zero-size cases of `realloc` the way C's `realloc` does.
#[allow(unsafe_code)]
unsafe impl Allocator for Counting {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        let ptr = self.inner.alloc(size);
        self.add(ptr);
        ptr
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        if count.checked_mul(size).is_none() {
            return std::ptr::null_mut();
        }
        let ptr = self.inner.calloc(count, size);
        self.add(ptr);
        ptr
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        self.used.fetch_sub(size_of(ptr), Ordering::Relaxed);
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.inner.dealloc(ptr) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        if new_size == 0 {
            // SAFETY: forwarded from the caller's contract.
            unsafe { self.dealloc(ptr) };
            return std::ptr::null_mut();
        }
        let old = size_of(ptr);
        // SAFETY: forwarded from the caller's contract.
        let moved = unsafe { self.inner.realloc(ptr, new_size) };
        if !moved.is_null() {
            self.used.fetch_sub(old, Ordering::Relaxed);
            self.add(moved);
        }
        moved
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        size_of(ptr)
    }
}

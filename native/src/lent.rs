//! Buffers Rust filled, lent to Python as they are: an `OwnedBuffer` keeps the vector and
//! exposes its bytes through the buffer protocol, so `pyarrow.py_buffer` wraps them without a
//! copy, and the vector is freed when Arrow lets go of the last array over it.

use std::ffi::{c_int, c_void};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// A vector of one of the element types Arrow's buffers hold.
pub enum Owned {
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Owned {
    fn bytes(&self) -> &[u8] {
        fn raw<T>(v: &[T]) -> &[u8] {
            // SAFETY: plain numbers, read as the bytes they are in memory (little-endian here)
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        }
        match self {
            Owned::U8(v) => v,
            Owned::I32(v) => raw(v),
            Owned::I64(v) => raw(v),
            Owned::F32(v) => raw(v),
            Owned::F64(v) => raw(v),
        }
    }
}

macro_rules! owned_from {
    ($($t:ty => $variant:ident),*) => {
        $(impl From<Vec<$t>> for Owned {
            fn from(v: Vec<$t>) -> Self {
                Owned::$variant(v)
            }
        })*
    };
}
owned_from!(u8 => U8, i32 => I32, i64 => I64, f32 => F32, f64 => F64);

/// Read-only bytes owned by Rust, for Python's buffer protocol. Never changed once made, so
/// the memory a view points at stays put for as long as the view holds this object.
#[pyclass(module = "mor_streamer_native", frozen)]
pub struct OwnedBuffer {
    owned: Owned,
}

#[pymethods]
impl OwnedBuffer {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("the buffer is read-only"));
        }
        let bytes = slf.get().owned.bytes();
        // fills the view over `bytes`, read-only, and takes a reference to `slf` for it
        let filled = ffi::PyBuffer_FillInfo(
            view,
            slf.as_ptr(),
            bytes.as_ptr() as *mut c_void,
            bytes.len() as ffi::Py_ssize_t,
            1,
            flags,
        );
        if filled == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.owned.bytes().len()
    }
}

/// `values` lent to Python.
pub fn lend<'py>(py: Python<'py>, values: impl Into<Owned>) -> PyResult<Bound<'py, PyAny>> {
    Ok(Bound::new(
        py,
        OwnedBuffer {
            owned: values.into(),
        },
    )?
    .into_any())
}

//! The arguments of a launch: [`KernelArg`] (what generated code passes,
//! one per kernel parameter), their checks against the kernel's signature,
//! binding the dynamic dimensions from tensor shapes, and the launch ABI's
//! parameter slots.
//!
//! Expects a kernel that `meta.rs` checked. Guarantees: [`check_args`]
//! rejects a wrong count, kind, element type, mutability or device with an
//! [`Error::Argument`] (or [`Error::DeviceMismatch`]) naming the parameter,
//! on the GPU and the interpreter alike; [`abi_params`] lays the parameters
//! out in the launch ABI order (tensor pointers, dims, scalars; tensor maps
//! last, appended by [`param_pointers`]; ARCHITECTURE.md, "Launch ABI").

use std::ffi::c_void;

use cudarc::driver::safe::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use half::{bf16, f16};
use tile_ir::{DType, Kernel, ParamKind, Value};

use crate::device::Stream;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::interop::{SliceRead, SliceWrite, TensorView, TensorViewMut};
use crate::tensor::{DeviceTensor, RawTensor, Reshaped, Storage};
use crate::tensor_map::TensorMap;

/// One argument of a kernel launch, in the kernel's parameter order.
pub enum KernelArg<'a> {
    /// A tensor the kernel reads (`&Tensor`).
    Tensor(&'a RawTensor),
    /// A tensor the kernel writes (`&mut Tensor`).
    TensorMut(&'a mut RawTensor),
    /// A read-only view of memory a cudarc slice owns ([`TensorView`]): its
    /// tensor facts, the slice, and the view's byte offset in it.
    View(&'a RawTensor, &'a dyn SliceRead, u64),
    /// A writable view ([`TensorViewMut`]).
    ViewMut(&'a RawTensor, &'a mut dyn SliceWrite, u64),
    /// A tensor seen with another shape ([`Reshaped`]): the view's facts,
    /// and the tensor whose bytes it reads.
    Reshaped(&'a RawTensor, &'a RawTensor),
    /// An `f32` scalar.
    F32(f32),
    /// An `i32` scalar.
    I32(i32),
    /// A `u32` scalar.
    U32(u32),
    /// An `f16` scalar.
    F16(f16),
    /// A `bf16` scalar.
    BF16(bf16),
}

impl<'a> KernelArg<'a> {
    /// A read-only tensor argument (`&Tensor<T, ..>`): a [`DeviceTensor`]
    /// or a view.
    pub fn tensor<A: TensorArg + ?Sized>(t: &'a A) -> Self {
        t.kernel_arg()
    }
    /// A writable tensor argument (`&mut Tensor<T, ..>`).
    pub fn tensor_mut<A: TensorArgMut + ?Sized>(t: &'a mut A) -> Self {
        t.kernel_arg_mut()
    }
    /// A scalar argument whose type is a generic kernel's type parameter
    /// (`alpha: T`): the variant of `T` (every element type converts
    /// through `f64` exactly).
    pub fn element<T: Element>(v: T) -> Self {
        let x = v.to_f64();
        match T::DTYPE {
            DType::F16 => KernelArg::F16(f16::from_f64(x)),
            DType::BF16 => KernelArg::BF16(bf16::from_f64(x)),
            DType::F32 => KernelArg::F32(x as f32),
            DType::I32 => KernelArg::I32(x as i32),
            _ => KernelArg::U32(x as u32),
        }
    }

    fn describe(&self) -> String {
        match self {
            KernelArg::Tensor(t) | KernelArg::View(t, ..) | KernelArg::Reshaped(t, _) => {
                format!("a read-only {} tensor", t.dtype)
            }
            KernelArg::TensorMut(t) => format!("a writable {} tensor", t.dtype),
            KernelArg::ViewMut(t, ..) => format!("a writable {} tensor", t.dtype),
            KernelArg::F32(_) => "an f32 scalar".into(),
            KernelArg::I32(_) => "an i32 scalar".into(),
            KernelArg::U32(_) => "a u32 scalar".into(),
            KernelArg::F16(_) => "an f16 scalar".into(),
            KernelArg::BF16(_) => "a bf16 scalar".into(),
        }
    }

    pub(super) fn scalar(&self) -> Option<Value> {
        Some(match *self {
            KernelArg::F32(v) => Value::F32(v),
            KernelArg::I32(v) => Value::I32(v),
            KernelArg::U32(v) => Value::U32(v),
            KernelArg::F16(v) => Value::F16(v),
            KernelArg::BF16(v) => Value::BF16(v),
            KernelArg::Tensor(_)
            | KernelArg::TensorMut(_)
            | KernelArg::View(..)
            | KernelArg::ViewMut(..)
            | KernelArg::Reshaped(..) => return None,
        })
    }

    pub(crate) fn raw(&self) -> Option<&RawTensor> {
        match self {
            KernelArg::Tensor(t) | KernelArg::View(t, ..) | KernelArg::ViewMut(t, ..) | KernelArg::Reshaped(t, _) => {
                Some(t)
            }
            KernelArg::TensorMut(t) => Some(t),
            _ => None,
        }
    }

    /// Whether this is a writable tensor argument.
    pub(crate) fn writable(&self) -> bool {
        matches!(self, KernelArg::TensorMut(_) | KernelArg::ViewMut(..))
    }
}

/// What a generated `launch` takes for a read-only tensor parameter
/// (`x: &Tensor<T, ..>`): a [`DeviceTensor<T>`], a [`TensorView`] or a
/// [`TensorViewMut`] of memory owned elsewhere (a cudarc `CudaSlice<T>`)
/// with [`Elem`](TensorArg::Elem) `= T`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensor a tile kernel can take",
    label = "not a tensor argument",
    note = "pass a `&DeviceTensor<T>`, or a `&TensorView<T>` / `&TensorViewMut<T>` over a cudarc `CudaSlice<T>`"
)]
pub trait TensorArg {
    /// The element type.
    type Elem: Element;
    #[doc(hidden)]
    fn kernel_arg(&self) -> KernelArg<'_>;
}

/// What a generated `launch` takes for a writable tensor parameter
/// (`y: &mut Tensor<T, ..>`): a [`DeviceTensor<T>`] or a [`TensorViewMut`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensor a tile kernel can write",
    label = "not a writable tensor argument",
    note = "pass a `&mut DeviceTensor<T>`, or a `&mut TensorViewMut<T>` over a `&mut CudaSlice<T>` (a `TensorView` is read-only)"
)]
pub trait TensorArgMut: TensorArg {
    #[doc(hidden)]
    fn kernel_arg_mut(&mut self) -> KernelArg<'_>;
}

impl<T: Element> TensorArg for DeviceTensor<T> {
    type Elem = T;
    fn kernel_arg(&self) -> KernelArg<'_> {
        KernelArg::Tensor(&self.raw)
    }
}

impl<T: Element> TensorArgMut for DeviceTensor<T> {
    fn kernel_arg_mut(&mut self) -> KernelArg<'_> {
        KernelArg::TensorMut(&mut self.raw)
    }
}

impl<T: Element> TensorArg for Reshaped<'_, T> {
    type Elem = T;
    fn kernel_arg(&self) -> KernelArg<'_> {
        KernelArg::Reshaped(&self.facts, self.data)
    }
}

impl<T: Element> TensorArg for TensorView<'_, T> {
    type Elem = T;
    fn kernel_arg(&self) -> KernelArg<'_> {
        KernelArg::View(&self.raw, self.slice, self.offset_bytes)
    }
}

impl<T: Element> TensorArg for TensorViewMut<'_, T> {
    type Elem = T;
    fn kernel_arg(&self) -> KernelArg<'_> {
        KernelArg::View(&self.raw, &*self.slice, self.offset_bytes)
    }
}

impl<T: Element> TensorArgMut for TensorViewMut<'_, T> {
    fn kernel_arg_mut(&mut self) -> KernelArg<'_> {
        KernelArg::ViewMut(&self.raw, &mut *self.slice, self.offset_bytes)
    }
}

pub(super) fn check_args(k: &Kernel, stream: &Stream, args: &[KernelArg<'_>]) -> Result<()> {
    if args.len() != k.params.len() {
        let names: Vec<&str> = k.params.iter().map(|p| p.name.as_str()).collect();
        return Err(Error::Argument {
            kernel: k.name.clone(),
            param: String::new(),
            message: format!(
                "the kernel takes {} arguments ({}), got {}",
                k.params.len(),
                names.join(", "),
                args.len()
            ),
        });
    }
    for (p, arg) in k.params.iter().zip(args) {
        let wrong = |expected: String| Error::Argument {
            kernel: k.name.clone(),
            param: p.name.clone(),
            message: format!("expects {expected}, got {}", arg.describe()),
        };
        match p.kind {
            ParamKind::Tensor(b) => {
                let buf = k.buffer(b);
                let expected =
                    || format!("a {} {} tensor", if buf.mutable { "writable" } else { "read-only" }, buf.dtype);
                let Some(t) = arg.raw() else { return Err(wrong(expected())) };
                if t.dtype != buf.dtype || (buf.mutable && !arg.writable()) {
                    return Err(wrong(expected()));
                }
                t.check_device(stream, &|| format!("tensor `{}` of kernel `{}`", p.name, k.name))?;
            }
            ParamKind::Scalar(v) => {
                let dtype = k.var(v).dtype;
                match arg.scalar() {
                    Some(value) if value.dtype() == dtype => {}
                    _ => return Err(wrong(format!("{} {dtype} scalar", article(dtype)))),
                }
            }
        }
    }
    Ok(())
}

/// "a" or "an" before a type name as spoken ("an f32", "a u32").
fn article(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 | DType::F32 | DType::I32 | DType::I64 => "an",
        DType::BF16 | DType::U32 | DType::Bool => "a",
    }
}

/// Binds each dynamic dimension (in `dims` order) from the tensor
/// arguments' shapes (`tile_ir::abi::bind_dims`, the same code for the GPU
/// and the interpreter); a disagreement is an [`Error::Shape`] naming the
/// parameter and the dimension.
pub(super) fn bind_dims(k: &Kernel, args: &[KernelArg<'_>]) -> Result<Vec<i64>> {
    let shapes: Vec<Option<&[usize]>> = args.iter().map(|a| a.raw().map(|t| t.shape.as_slice())).collect();
    tile_ir::abi::bind_dims(k, &shapes).map_err(|e| Error::Shape {
        kernel: k.name.clone(),
        param: e.param,
        dim: e.dim,
        message: e.message,
    })
}

/// One launch parameter's bytes; `cuLaunchKernel` reads each through a pointer.
#[derive(Copy, Clone)]
#[repr(C, align(8))]
pub(super) struct ParamSlot([u8; 8]);

impl ParamSlot {
    pub(super) fn new(bytes: &[u8]) -> ParamSlot {
        let mut slot = [0u8; 8];
        slot[..bytes.len()].copy_from_slice(bytes);
        ParamSlot(slot)
    }
}

/// The launch parameters in ABI order: tensor pointers (params order), each
/// dynamic dimension as i32 (`dims` order), scalars (params order; 16-bit
/// floats as their bits).
///
/// Pointers are taken through cudarc's `DevicePtr`/`DevicePtrMut` on
/// `stream` (writable tensors as writes), so cudarc's multi-stream tracking
/// sees the kernel's accesses: the returned guards record them when dropped,
/// which must happen after the launch is issued. Host tensors (the
/// interpreter, in tests) give null pointers. Also returns each tensor
/// parameter's address (`None` for scalars), in parameter order.
pub(super) fn abi_params<'a>(
    k: &Kernel,
    args: &'a mut [KernelArg<'_>],
    dims: &[i64],
    stream: Option<&'a CudaStream>,
) -> (Vec<ParamSlot>, Vec<SyncOnDrop<'a>>, Vec<Option<u64>>) {
    let scalars: Vec<ParamSlot> = args
        .iter()
        .filter_map(|arg| match *arg {
            KernelArg::F32(v) => Some(ParamSlot::new(&v.to_le_bytes())),
            KernelArg::I32(v) => Some(ParamSlot::new(&v.to_le_bytes())),
            KernelArg::U32(v) => Some(ParamSlot::new(&v.to_le_bytes())),
            KernelArg::F16(v) => Some(ParamSlot::new(&v.to_bits().to_le_bytes())),
            KernelArg::BF16(v) => Some(ParamSlot::new(&v.to_bits().to_le_bytes())),
            KernelArg::Tensor(_)
            | KernelArg::TensorMut(_)
            | KernelArg::View(..)
            | KernelArg::ViewMut(..)
            | KernelArg::Reshaped(..) => None,
        })
        .collect();
    let mut slots = Vec::with_capacity(k.params.len() + k.dims.len());
    let mut guards = Vec::new();
    let mut addresses = Vec::with_capacity(args.len());
    for arg in args.iter_mut() {
        let (ptr, guard) = match (arg, stream) {
            (KernelArg::Tensor(t) | KernelArg::Reshaped(_, t), Some(stream)) => match &t.storage {
                Storage::Cuda { slice: Some(slice), .. } => {
                    let (ptr, guard) = slice.device_ptr(stream);
                    (ptr, Some(guard))
                }
                _ => (0, None),
            },
            (KernelArg::TensorMut(t), Some(stream)) => match &mut t.storage {
                Storage::Cuda { slice: Some(slice), .. } => {
                    let (ptr, guard) = slice.device_ptr_mut(stream);
                    (ptr, Some(guard))
                }
                _ => (0, None),
            },
            // A view: the slice's address (through cudarc, on the launch's
            // stream) plus the view's offset.
            (KernelArg::View(_, slice, offset), Some(stream)) => {
                let (ptr, guard) = slice.read_ptr(stream);
                (ptr + *offset, Some(guard))
            }
            (KernelArg::ViewMut(_, slice, offset), Some(stream)) => {
                let offset = *offset;
                let (ptr, guard) = slice.write_ptr(stream);
                (ptr + offset, Some(guard))
            }
            (
                KernelArg::Tensor(_)
                | KernelArg::TensorMut(_)
                | KernelArg::View(..)
                | KernelArg::ViewMut(..)
                | KernelArg::Reshaped(..),
                None,
            ) => (0, None),
            _ => {
                addresses.push(None);
                continue;
            }
        };
        addresses.push(Some(ptr));
        slots.push(ParamSlot::new(&ptr.to_le_bytes()));
        guards.extend(guard);
    }
    for &d in dims {
        // `bind_dims` guarantees every dimension fits in i32.
        slots.push(ParamSlot::new(&(d as i32).to_le_bytes()));
    }
    slots.extend(scalars);
    // The divisors' magic numbers (`tile_ir::abi::dims_divisors`).
    let divisors = tile_ir::abi::divisor_args(k, dims);
    slots.extend(divisors.iter().map(|v| ParamSlot::new(&v.to_le_bytes())));
    debug_assert_eq!(slots.len(), k.params.len() + k.dims.len() + divisors.len());
    (slots, guards, addresses)
}

/// The parameter array `cuLaunchKernel` reads: a pointer to each slot, then
/// each tensor map's 128 bytes ([`TensorMap::param_ptr`]), in the variant's
/// order. Valid while `slots` and `maps` live and do not move.
pub(super) fn param_pointers(slots: &mut [ParamSlot], maps: &[TensorMap]) -> Vec<*mut c_void> {
    let mut pointers: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut ParamSlot).cast()).collect();
    pointers.extend(maps.iter().map(TensorMap::param_ptr));
    pointers
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::gemm_like;
    use super::*;
    use tile_ir::Extent;

    /// The ABI order: tensor pointers, then dims in `dims` order, then scalars
    /// in parameter order, 16-bit floats as their bits.
    #[test]
    fn launch_parameters_follow_the_abi_order() {
        let mut k = Kernel::new("abi", 32);
        let m = k.add_dim("M");
        let n = k.add_dim("N");
        k.add_tensor_param("x", DType::F32, vec![Extent::Dyn(n), Extent::Dyn(m)], false);
        k.add_scalar_param("h", DType::F16);
        k.add_tensor_param("y", DType::F32, vec![Extent::Dyn(m)], true);
        k.add_scalar_param("b", DType::BF16);
        k.add_scalar_param("u", DType::U32);
        k.add_scalar_param("f", DType::F32);
        let x = RawTensor { shape: vec![5, 3], dtype: DType::F32, storage: Storage::Host(vec![0; 60]) };
        let mut y = RawTensor { shape: vec![3], dtype: DType::F32, storage: Storage::Host(vec![0; 12]) };
        let h = f16::from_f32(-2.5);
        let b = bf16::from_f32(0.75);
        let mut args = [
            KernelArg::Tensor(&x),
            KernelArg::F16(h),
            KernelArg::TensorMut(&mut y),
            KernelArg::BF16(b),
            KernelArg::U32(0xDEAD_BEEF),
            KernelArg::F32(1.25),
        ];
        let (slots, guards, addresses) = abi_params(&k, &mut args, &[3, 5], None);
        assert_eq!(addresses, vec![Some(0), None, Some(0), None, None, None]);
        assert!(guards.is_empty());
        let words: Vec<u64> = slots.iter().map(|s| u64::from_le_bytes(s.0)).collect();
        assert_eq!(
            words,
            vec![0, 0, 3, 5, h.to_bits() as u64, b.to_bits() as u64, 0xDEAD_BEEF, 1.25f32.to_bits() as u64]
        );
    }

    /// Tensor maps come after every other parameter, in the variant's order,
    /// each as a pointer to its 128 bytes.
    #[test]
    fn tensor_maps_are_appended_after_the_other_parameters() {
        let k = gemm_like();
        let a = RawTensor { shape: vec![2, 8], dtype: DType::F16, storage: Storage::Host(vec![0; 32]) };
        let mut c = RawTensor { shape: vec![2, 8], dtype: DType::F16, storage: Storage::Host(vec![0; 32]) };
        let mut args = [KernelArg::Tensor(&a), KernelArg::F32(0.5), KernelArg::TensorMut(&mut c)];
        let (mut slots, _guards, _) = abi_params(&k, &mut args, &[2, 8, 8], None);
        assert_eq!(slots.len(), 6);
        let maps = [TensorMap::from_bytes([1; 128]), TensorMap::from_bytes([2; 128])];
        let pointers = param_pointers(&mut slots, &maps);
        assert_eq!(pointers.len(), 8);
        for (p, s) in pointers.iter().zip(slots.iter()) {
            assert_eq!(*p as *const ParamSlot, s as *const ParamSlot);
        }
        assert_eq!(pointers[6], maps[0].param_ptr());
        assert_eq!(pointers[7], maps[1].param_ptr());
        // SAFETY: the pointers point at the live slots and maps above.
        let words: Vec<u64> = pointers[..6].iter().map(|&p| unsafe { *(p as *const u64) }).collect();
        assert_eq!(words, vec![0, 0, 2, 8, 8, 0.5f32.to_bits() as u64]);
        assert_eq!(unsafe { *(pointers[7] as *const [u8; 128]) }, [2; 128]);
    }
}

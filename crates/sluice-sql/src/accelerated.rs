//! A DataFusion scalar function with a faster path for its common case.
//!
//! Sluice replaces a few of DataFusion's scalar functions (`to_char`,
//! `split_part`) where a streaming query spends much of its time in them.
//! Each keeps DataFusion's function whole (its name, signature, return
//! type, documentation, results and errors) and adds one [`FastPath`]: a
//! function of the call's arguments that either computes the result or
//! declines, in which case DataFusion's function runs. The fast path's
//! tests compare the two on the same arguments.

use std::fmt::Debug;
use std::hash::Hash;
use std::marker::PhantomData;

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// The faster computation of one DataFusion function's common case.
pub(crate) trait FastPath: 'static {
    /// DataFusion's function: what runs whenever [`Self::compute`] declines.
    type Inner: ScalarUDFImpl + Default + PartialEq + Eq + Hash;

    /// The result over `args` (the call's arguments, after coercion), or
    /// `None` to let DataFusion's function compute it, errors included.
    fn compute(args: &[ColumnarValue]) -> Option<ArrayRef>;
}

/// DataFusion's function `P::Inner`, with `P`'s fast path in front.
pub(crate) struct Accelerated<P: FastPath> {
    inner: P::Inner,
    /// `fn() -> P`: the path is a type, never a value, so it adds no
    /// `Send`, `Sync`, `Debug` or `Eq` requirement of its own.
    path: PhantomData<fn() -> P>,
}

impl<P: FastPath> Accelerated<P> {
    /// The function as a session registers it.
    pub(crate) fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(Self::default())
    }
}

impl<P: FastPath> Default for Accelerated<P> {
    fn default() -> Self {
        Self {
            inner: P::Inner::default(),
            path: PhantomData,
        }
    }
}

impl<P: FastPath> Debug for Accelerated<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accelerated")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<P: FastPath> PartialEq for Accelerated<P> {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl<P: FastPath> Eq for Accelerated<P> {}

impl<P: FastPath> Hash for Accelerated<P> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl<P: FastPath> ScalarUDFImpl for Accelerated<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match P::compute(&args.args) {
            Some(out) => Ok(ColumnarValue::Array(out)),
            None => self.inner.invoke_with_args(args),
        }
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

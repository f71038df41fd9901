//! Native failures as Kotlin's typed exceptions: [`Failure`] holds one in the contract's encoding
//! ([`crate::contract`]), [`Throw`] throws it as `IreeNativeError(kind, message, texts, numbers)`, which the Kotlin
//! side turns into the class the contract names. A panic becomes an `IreeInternalException`; nothing aborts the JVM.

use jni::Env;
use jni::errors::ErrorPolicy;
use jni::objects::{JObject, JObjectArray, JValue};
use jni::strings::JNIString;
use tapeout_iree::IreeError;

use crate::contract::{ErrorKind, FieldType};

/// A failure to report to Kotlin: its kind (the exception class), message and fields in the contract's order.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
    texts: Vec<String>,
    numbers: Vec<i64>,
    /// The field types pushed, in order: what the contract's class must list (checked by the tests).
    layout: Vec<FieldType>,
}

impl Failure {
    /// A failure of `kind` with no fields yet.
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Failure {
        Failure { kind, message: message.into(), texts: Vec::new(), numbers: Vec::new(), layout: Vec::new() }
    }

    fn text_as(mut self, text: impl Into<String>, as_type: FieldType) -> Failure {
        self.texts.push(text.into());
        self.layout.push(as_type);
        self
    }

    fn number_as(mut self, number: i64, as_type: FieldType) -> Failure {
        self.numbers.push(number);
        self.layout.push(as_type);
        self
    }

    /// The next field, a `String`.
    pub(crate) fn text(self, text: impl Into<String>) -> Failure {
        self.text_as(text, FieldType::Text)
    }

    /// The next field, a `File`.
    pub(crate) fn file(self, path: &std::path::Path) -> Failure {
        self.text_as(path.display().to_string(), FieldType::File)
    }

    /// The next field, a `List<String>`.
    pub(crate) fn texts(mut self, texts: Vec<String>) -> Failure {
        self.numbers.push(i64::try_from(texts.len()).unwrap_or(i64::MAX));
        self.texts.extend(texts);
        self.layout.push(FieldType::Texts);
        self
    }

    /// The next field, an `Int` (saturated: the counts it carries are small).
    pub(crate) fn int(self, n: usize) -> Failure {
        let n = i64::from(i32::try_from(n).unwrap_or(i32::MAX));
        self.number_as(n, FieldType::Int)
    }

    /// The next field, a `Long` (saturated at `Long.MAX_VALUE`).
    pub(crate) fn long(self, n: u64) -> Failure {
        self.number_as(i64::try_from(n).unwrap_or(i64::MAX), FieldType::Long)
    }

    /// The next field, an `IreeStatusCode`.
    pub(crate) fn status(self, code: tapeout_iree::StatusCode) -> Failure {
        self.number_as(i64::from(code.raw()), FieldType::Status)
    }

    #[cfg(test)]
    pub(crate) fn layout(&self) -> &[FieldType] {
        &self.layout
    }
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Self {
        Failure::new(ErrorKind::Internal, format!("JNI call failed: {e}"))
    }
}

/// A misuse of the API that reached the native side.
pub(crate) fn usage(message: impl Into<String>) -> Failure {
    Failure::new(ErrorKind::Usage, message)
}

impl From<IreeError> for Failure {
    fn from(e: IreeError) -> Self {
        let message = e.to_string();
        let f = |kind| Failure::new(kind, message.clone());
        match e {
            IreeError::Runtime { code, during, .. } => f(ErrorKind::Runtime).status(code).text(during),
            IreeError::DeviceUnavailable { driver, uri, code, .. } => {
                f(ErrorKind::DeviceUnavailable).text(driver).text(uri).status(code)
            }
            IreeError::NotAModule { .. } => f(ErrorKind::NotAModule),
            IreeError::WrongTarget { device, .. } => f(ErrorKind::WrongTarget).text(device),
            IreeError::MissingParameter { key, .. } => f(ErrorKind::MissingParameter).text(key),
            IreeError::ParameterFile { path, .. } => f(ErrorKind::ParameterFile).file(&path),
            IreeError::NoSuchFunction { name, available } => f(ErrorKind::NoSuchFunction).text(name).texts(available),
            IreeError::Arity { function, expected, given, .. } => {
                f(ErrorKind::Arity).text(function).int(expected).int(given)
            }
            IreeError::DType { function, index, argument, expected, given } => {
                f(ErrorKind::DType).text(function).int(index).text(argument).text(expected).text(given)
            }
            IreeError::Shape { function, index, argument, expected, given } => {
                f(ErrorKind::Shape).text(function).int(index).text(argument).text(expected).text(given)
            }
            IreeError::Size { expected, given, .. } => f(ErrorKind::Size).long(expected).long(given),
            IreeError::Io { path, .. } => f(ErrorKind::Io).file(&path),
            IreeError::ForeignValue { what } => f(ErrorKind::ForeignValue).text(what),
            IreeError::UnequalDims { function, first, second } => f(ErrorKind::UnequalDims)
                .text(function)
                .text(first.0)
                .int(first.1)
                .long(first.2)
                .text(second.0)
                .int(second.1)
                .long(second.2),
            IreeError::MissingCpuFeatures { device, cpu, missing, unchecked } => {
                f(ErrorKind::MissingCpuFeatures).text(device).text(cpu).texts(missing).texts(unchecked)
            }
            IreeError::ConflictingParameter { scope, key, first, second, .. } => {
                f(ErrorKind::ConflictingParameter).text(scope).text(key).file(&first).file(&second)
            }
        }
    }
}

/// A `String[]` of `texts`, each element's local reference deleted once stored: a JNI method may hold only 16
/// local references without asking for more.
pub(crate) fn string_array<'l>(env: &mut Env<'l>, texts: &[String]) -> Result<JObjectArray<'l>, Failure> {
    let count = i32::try_from(texts.len()).map_err(|_| usage("more strings than a JVM array holds"))?;
    let array = env.new_object_array(count, JNIString::from("java/lang/String"), JObject::null())?;
    for (i, text) in texts.iter().enumerate() {
        let s = env.new_string(text)?;
        array.set_element(env, i, &s)?;
        env.delete_local_ref(s);
    }
    Ok(array)
}

/// Throws `IreeNativeError(kind, message, texts, numbers)` for an error, an internal failure for a panic.
pub(crate) struct Throw;

const ERROR_CLASS: &str = "dev/tapeout/iree/IreeNativeError";

fn throw(env: &mut Env<'_>, f: Failure) {
    let attempt = (|| -> jni::errors::Result<()> {
        let message = env.new_string(&f.message)?;
        let texts = string_array(env, &f.texts)
            .map_err(|_| jni::errors::Error::JniCall(jni::errors::JniError::InvalidArguments))?;
        let numbers = env.new_long_array(f.numbers.len())?;
        numbers.set_region(env, 0, &f.numbers)?;
        let obj = env.new_object(
            JNIString::from(ERROR_CLASS),
            jni::jni_sig!("(ILjava/lang/String;[Ljava/lang/String;[J)V"),
            &[JValue::Int(f.kind.code()), JValue::Object(&message), JValue::Object(&texts), JValue::Object(&numbers)],
        )?;
        let throwable = jni::objects::JThrowable::cast_local(env, obj)?;
        env.throw(throwable)
    })();
    if attempt.is_err() && !env.exception_check() {
        let _ = env.throw_new(
            JNIString::from("java/lang/RuntimeException"),
            JNIString::from(format!("tapeout iree: {:?}: {}", f.kind, f.message)),
        );
    }
}

impl<T: Default> ErrorPolicy<T, Failure> for Throw {
    type Captures<'unowned_env_local: 'native_method, 'native_method> = ();

    fn on_error<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        err: Failure,
    ) -> jni::errors::Result<T> {
        if !env.exception_check() {
            throw(env, err);
        }
        Ok(T::default())
    }

    fn on_panic<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        payload: Box<dyn std::any::Any + Send + 'static>,
    ) -> jni::errors::Result<T> {
        let message = match payload.downcast::<String>() {
            Ok(s) => *s,
            Err(p) => p.downcast::<&'static str>().map_or_else(|_| "unknown panic".to_owned(), |s| (*s).to_owned()),
        };
        if !env.exception_check() {
            throw(env, Failure::new(ErrorKind::Internal, format!("native panic: {message}")));
        }
        Ok(T::default())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

    use std::path::PathBuf;

    use tapeout_iree::{DType, StatusCode};

    use super::*;

    /// One error of every `IreeError` variant: each crosses with exactly the fields its contract class lists.
    #[test]
    fn every_error_crosses_with_its_classes_fields() {
        let s = |t: &str| t.to_owned();
        let errors = vec![
            IreeError::Runtime { during: s("d"), code: StatusCode::Internal, message: s("m") },
            IreeError::DeviceUnavailable { driver: s("v"), uri: s("v"), code: StatusCode::NotFound, message: s("m") },
            IreeError::NotAModule { what: s("w"), message: s("m") },
            IreeError::WrongTarget { device: s("d"), message: s("m") },
            IreeError::MissingParameter { key: s("k"), message: s("m") },
            IreeError::ParameterFile { path: PathBuf::from("p"), message: s("m") },
            IreeError::NoSuchFunction { name: s("f"), available: vec![s("a"), s("b")] },
            IreeError::Arity { function: s("f"), expected: 2, given: 1, names: vec![] },
            IreeError::DType { function: s("f"), index: 0, argument: s("a"), expected: s("f32"), given: s("i8") },
            IreeError::Shape { function: s("f"), index: 0, argument: s("a"), expected: s("[2]"), given: s("[3]") },
            IreeError::Size { what: s("w"), expected: 4, given: 3, dtype: DType::F32, shape: s("[1]") },
            IreeError::Io { path: PathBuf::from("p"), source: std::io::Error::other("x") },
            IreeError::ForeignValue { what: s("w") },
            IreeError::MissingCpuFeatures { device: s("d"), cpu: s("c"), missing: vec![s("m")], unchecked: vec![] },
            IreeError::UnequalDims { function: s("f"), first: (s("a"), 0, 7), second: (s("b"), 1, 3) },
            IreeError::ConflictingParameter {
                scope: s("s"),
                key: s("k"),
                first: PathBuf::from("a"),
                second: PathBuf::from("b"),
                detail: s("d"),
            },
        ];
        for e in errors {
            let text = e.to_string();
            let f = Failure::from(e);
            let class = f.kind.class();
            let want: Vec<FieldType> = class.fields.iter().map(|f| f.1).collect();
            assert_eq!(f.layout(), want.as_slice(), "{} ({text})", class.name);
            assert_eq!(f.message, text);
        }
    }
}

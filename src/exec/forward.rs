//! [`forward_execution_environment!`](crate::forward_execution_environment): writes the
//! methods of an `ExecutionEnvironment` impl that only pass the call on to another one. It
//! never decides anything: what a decorator changes, it writes itself.

/// Writes [`ExecutionEnvironment`](crate::exec::ExecutionEnvironment) methods that pass the
/// call on unchanged, so a decorator spells out only the methods it changes.
///
/// Inside an `impl ExecutionEnvironment for …` block, name where the calls go and which
/// methods go there:
///
/// - `forward_execution_environment!(self.inner => read_file, stat);` forwards to a field
///   (`self.0` for a tuple struct);
/// - `forward_execution_environment!(**self => read_file, stat);` forwards through a smart
///   pointer (how `Arc<E>` and `Box<E>` implement the trait).
///
/// Every trait method has a name here, the provided ones (`initialize`, `cleanup`,
/// `max_command_timeout`, `write_file_if_unchanged`, `warnings`, `files_are_local`,
/// `start_background`) included: a decorator that leaves a provided method out gets the
/// trait's default, not the inner environment's, so list it to forward it. A name that is not a
/// method of the trait does not compile. The trait's documentation has an example.
#[macro_export]
macro_rules! forward_execution_environment {
    (self.$field:tt => $($method:ident),+ $(,)?) => {
        $($crate::forward_execution_environment!(@method [field $field] $method);)+
    };
    (**self => $($method:ident),+ $(,)?) => {
        $($crate::forward_execution_environment!(@method [deref] $method);)+
    };
    // `self` comes from the arm that writes the method's signature (hygiene).
    (@to $this:ident [field $field:tt]) => { $this.$field };
    (@to $this:ident [deref]) => { (**$this) };
    (@method $to:tt read_file) => {
        fn read_file(
            &self,
            path: &::std::path::Path,
            offset: ::std::option::Option<usize>,
            limit: ::std::option::Option<usize>,
        ) -> ::std::io::Result<$crate::exec::FileContent> {
            $crate::forward_execution_environment!(@to self $to).read_file(path, offset, limit)
        }
    };
    (@method $to:tt read_bytes) => {
        fn read_bytes(&self, path: &::std::path::Path) -> ::std::io::Result<::std::vec::Vec<u8>> {
            $crate::forward_execution_environment!(@to self $to).read_bytes(path)
        }
    };
    (@method $to:tt write_file) => {
        fn write_file(&self, path: &::std::path::Path, content: &[u8]) -> ::std::io::Result<()> {
            $crate::forward_execution_environment!(@to self $to).write_file(path, content)
        }
    };
    (@method $to:tt write_file_if_unchanged) => {
        fn write_file_if_unchanged(
            &self,
            path: &::std::path::Path,
            content: &[u8],
            expected: &$crate::exec::FileStat,
        ) -> ::std::io::Result<()> {
            $crate::forward_execution_environment!(@to self $to)
                .write_file_if_unchanged(path, content, expected)
        }
    };
    (@method $to:tt files_are_local) => {
        fn files_are_local(&self) -> bool {
            $crate::forward_execution_environment!(@to self $to).files_are_local()
        }
    };
    (@method $to:tt warnings) => {
        fn warnings(&self) -> ::std::vec::Vec<::std::string::String> {
            $crate::forward_execution_environment!(@to self $to).warnings()
        }
    };
    (@method $to:tt remove_file) => {
        fn remove_file(&self, path: &::std::path::Path) -> ::std::io::Result<()> {
            $crate::forward_execution_environment!(@to self $to).remove_file(path)
        }
    };
    (@method $to:tt file_exists) => {
        fn file_exists(&self, path: &::std::path::Path) -> bool {
            $crate::forward_execution_environment!(@to self $to).file_exists(path)
        }
    };
    (@method $to:tt stat) => {
        fn stat(&self, path: &::std::path::Path) -> ::std::io::Result<$crate::exec::FileStat> {
            $crate::forward_execution_environment!(@to self $to).stat(path)
        }
    };
    (@method $to:tt list_directory) => {
        fn list_directory(
            &self,
            path: &::std::path::Path,
            depth: usize,
        ) -> ::std::io::Result<::std::vec::Vec<$crate::exec::DirEntry>> {
            $crate::forward_execution_environment!(@to self $to).list_directory(path, depth)
        }
    };
    (@method $to:tt exec_command) => {
        fn exec_command(
            &self,
            request: &$crate::exec::CommandRequest,
            on_output: $crate::exec::OutputCallback<'_>,
            cancel: &$crate::CancelToken,
        ) -> ::std::io::Result<$crate::exec::ExecResult> {
            $crate::forward_execution_environment!(@to self $to)
                .exec_command(request, on_output, cancel)
        }
    };
    (@method $to:tt start_background) => {
        fn start_background(
            &self,
            request: &$crate::exec::CommandRequest,
            output_limit: usize,
            on_exit: $crate::exec::ExitCallback,
        ) -> ::std::io::Result<::std::boxed::Box<dyn $crate::exec::BackgroundProcess>> {
            $crate::forward_execution_environment!(@to self $to)
                .start_background(request, output_limit, on_exit)
        }
    };
    (@method $to:tt grep) => {
        fn grep(
            &self,
            pattern: &str,
            path: &::std::path::Path,
            options: &$crate::exec::GrepOptions,
        ) -> ::std::io::Result<$crate::exec::GrepOutput> {
            $crate::forward_execution_environment!(@to self $to).grep(pattern, path, options)
        }
    };
    (@method $to:tt glob) => {
        fn glob(
            &self,
            pattern: &str,
            path: &::std::path::Path,
        ) -> ::std::io::Result<::std::vec::Vec<::std::string::String>> {
            $crate::forward_execution_environment!(@to self $to).glob(pattern, path)
        }
    };
    (@method $to:tt initialize) => {
        fn initialize(&self) -> ::std::io::Result<()> {
            $crate::forward_execution_environment!(@to self $to).initialize()
        }
    };
    (@method $to:tt cleanup) => {
        fn cleanup(&self) -> ::std::io::Result<()> {
            $crate::forward_execution_environment!(@to self $to).cleanup()
        }
    };
    (@method $to:tt working_directory) => {
        fn working_directory(&self) -> &::std::path::Path {
            $crate::forward_execution_environment!(@to self $to).working_directory()
        }
    };
    (@method $to:tt platform) => {
        fn platform(&self) -> ::std::string::String {
            $crate::forward_execution_environment!(@to self $to).platform()
        }
    };
    (@method $to:tt os_version) => {
        fn os_version(&self) -> ::std::string::String {
            $crate::forward_execution_environment!(@to self $to).os_version()
        }
    };
    (@method $to:tt max_command_timeout) => {
        fn max_command_timeout(&self) -> ::std::time::Duration {
            $crate::forward_execution_environment!(@to self $to).max_command_timeout()
        }
    };
}

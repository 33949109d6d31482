// heterograd-run's file layer: atomic writes that fail loudly and leave the old file, and reads
// that refuse what is not a regular file.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <boost/test/unit_test.hpp>

#include "files.hpp"

namespace fs = std::filesystem;
using namespace hgrun;

namespace {

fs::path fresh_dir(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("hg_files_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::size_t entries(const fs::path& d) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++n;
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_write_replaces_the_file_whole_and_leaves_no_temporary) {
  const auto d = fresh_dir("replace");
  write_file(d / "a.json", "old");
  write_file(d / "a.json", std::string(100000, 'x'));
  BOOST_TEST(read_file(d / "a.json") == std::string(100000, 'x'));
  BOOST_TEST(entries(d) == 1u);
  fs::remove_all(d);
}

BOOST_AUTO_TEST_CASE(a_write_into_a_missing_folder_is_an_error_naming_the_file) {
  const auto d = fresh_dir("missing");
  const auto f = d / "no" / "such" / "summary.json";
  try {
    write_file(f, "x");
    BOOST_FAIL("no error");
  } catch (const output_error& e) {
    BOOST_TEST(std::string(e.what()).find(f.string()) != std::string::npos);
    BOOST_TEST(e.file() == f);
  }
  fs::remove_all(d);
}

// A file size limit makes write(2) fail part-way (EFBIG), as a full disk would. The child process
// takes the limit; the parent checks that the old content survived and no temporary is left.
BOOST_AUTO_TEST_CASE(a_write_that_fails_part_way_keeps_the_old_file_and_removes_its_temporary) {
  const auto d = fresh_dir("partial");
  const auto f = d / "evaluations.csv";
  write_file(f, "old");
  const pid_t pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      write_file(f, std::string(1 << 20, 'y'));
    } catch (const output_error& e) {
      ::_exit(std::string(e.what()).find(f.string()) != std::string::npos ? 0 : 2);
    }
    ::_exit(1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);  // 1: no error raised; 2: the error does not name the file
  BOOST_TEST(read_file(f) == "old");
  BOOST_TEST(entries(d) == 1u);
  fs::remove_all(d);
}

BOOST_AUTO_TEST_CASE(a_read_refuses_a_fifo_a_folder_and_a_device_without_blocking) {
  const auto d = fresh_dir("fifo");
  BOOST_REQUIRE(::mkfifo((d / "pipe").c_str(), 0600) == 0);
  BOOST_CHECK_THROW(read_file(d / "pipe"), std::runtime_error);
  BOOST_CHECK_THROW(read_file(d), std::runtime_error);
  BOOST_CHECK_THROW(read_file("/dev/zero"), std::runtime_error);
  BOOST_CHECK_THROW(read_file(d / "absent"), std::runtime_error);
  fs::remove_all(d);
}

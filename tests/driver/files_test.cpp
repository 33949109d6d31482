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

// Links planted in heterograd-run's folders (files.hpp): a file is never written through a
// link or truncated, and a linked folder inside a folder with the marker is refused by name.
BOOST_AUTO_TEST_SUITE(planted_links)

// A link (or a hard link) waiting at the name of write_file()'s temporary, ".a.json.tmp-<pid>":
// opened without O_EXCL | O_NOFOLLOW it would write into the user's file.
BOOST_AUTO_TEST_CASE(a_link_at_the_temporarys_name_is_replaced_and_the_file_it_points_to_is_untouched) {
  const auto d = fresh_dir("temp_link");
  const auto victim = d / "victim.txt";
  write_file(victim, "precious");
  const std::string pid = std::to_string(::getpid());
  fs::create_symlink(victim, d / (".a.json.tmp-" + pid));
  BOOST_REQUIRE(::link(victim.c_str(), (d / (".b.json.tmp-" + pid)).c_str()) == 0);
  write_file(d / "a.json", "new a");
  write_file(d / "b.json", "new b");
  // A link under the target's own name is replaced by the rename, never written through.
  fs::create_symlink(victim, d / "c.json");
  write_file(d / "c.json", "new c");
  BOOST_TEST(read_file(victim) == "precious");
  for (const char* f : {"a.json", "b.json", "c.json"}) {
    BOOST_TEST(fs::is_regular_file(fs::symlink_status(d / f)), f);
    BOOST_TEST(read_file(d / f) == "new " + std::string(1, f[0]), f);
  }
  BOOST_TEST(entries(d) == 4u);  // victim and the three files: no temporary or link is left
  fs::remove_all(d);
}

// create_fresh(), the logs of child processes and of the plotting program: an earlier file, a
// link or a hard link under the name loses its name; what it points to is not truncated.
BOOST_AUTO_TEST_CASE(create_fresh_makes_a_new_file_and_never_truncates_a_linked_one) {
  const auto d = fresh_dir("fresh");
  const auto victim = d / "victim.txt";
  write_file(victim, "precious");
  fs::create_symlink(victim, d / "log.txt");
  BOOST_REQUIRE(::link(victim.c_str(), (d / "charts.log").c_str()) == 0);
  write_file(d / "earlier.log", "an earlier run's messages");
  for (const char* f : {"log.txt", "charts.log", "earlier.log"}) {
    const int fd = create_fresh(d / f);
    BOOST_TEST_REQUIRE(fd >= 0);
    BOOST_TEST(::write(fd, "x", 1) == 1);
    ::close(fd);
    BOOST_TEST(fs::is_regular_file(fs::symlink_status(d / f)), f);
    BOOST_TEST(read_file(d / f) == "x", f);
  }
  BOOST_TEST(read_file(victim) == "precious");
  fs::create_directories(d / "folder.log");
  BOOST_CHECK_EXCEPTION(create_fresh(d / "folder.log"), output_error, [&](const output_error& e) {
    return e.file() == d / "folder.log" && std::string(e.what()).find("folder") != std::string::npos;
  });
  fs::remove_all(d);
}

// A method folder (a folder inside the output folder, which carries the marker) replaced by a
// link to a folder elsewhere: writes into it are refused naming the link, and nothing lands
// there. The output folder itself may be a link (it lies in a folder of the user's).
BOOST_AUTO_TEST_CASE(a_linked_folder_inside_a_marked_folder_is_refused_by_name_and_a_linked_output_folder_is_not) {
  const auto d = fresh_dir("linked_folder");
  const auto out = d / "out", elsewhere = d / "elsewhere";
  fs::create_directories(out);
  fs::create_directories(elsewhere);
  write_file(out / folder_marker, "marker");
  fs::create_symlink(elsewhere, out / "vanilla-asgd");
  const auto is_refusal = [&](const output_error& e) {
    const std::string w = e.what();
    return e.file() == out / "vanilla-asgd" && w.find("symbolic link") != std::string::npos &&
           w.find(elsewhere.string()) != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(write_file(out / "vanilla-asgd" / "summary.json", "{}"), output_error, is_refusal);
  BOOST_CHECK_EXCEPTION(create_fresh(out / "vanilla-asgd" / "log.txt"), output_error, is_refusal);
  BOOST_CHECK_EXCEPTION(refuse_planted_link(out / "vanilla-asgd"), output_error, is_refusal);
  BOOST_TEST(entries(elsewhere) == 0u);
  // --out naming a link (its parent d carries no marker): followed.
  fs::create_symlink(out, d / "chosen");
  write_file(d / "chosen" / "table.md", "| a |");
  BOOST_TEST(read_file(out / "table.md") == "| a |");
  fs::remove_all(d);
}

BOOST_AUTO_TEST_SUITE_END()

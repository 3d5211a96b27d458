#include "planner_service/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace octopipe::planner {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

// The file's bytes; errors name `flag` and `path` and say what is wrong with it.
absl::StatusOr<std::string> ReadRegularFile(const std::string& flag, const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot read '", path, "': ", ec.message()));
  }
  if (std::filesystem::is_directory(st)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", path, "' is a directory, not a PEM file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot read '", path, "': ", std::strerror(errno)));
  }
  std::stringstream s;
  s << in.rdbuf();
  if (s.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", path, "' is empty"));
  }
  return s.str();
}

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::StatusOr<std::unique_ptr<X509, X509Free>> FirstCertificate(const std::string& flag,
                                                                 const std::string& path,
                                                                 const std::string& pem) {
  Bio bio = MemoryBio(pem);
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", path,
                     "' holds no PEM certificate (expected a '-----BEGIN CERTIFICATE-----' "
                     "block)"));
  }
  return cert;
}

}  // namespace

absl::StatusOr<grpc::SslServerCredentialsOptions> LoadServerTls(const TlsFiles& files) {
  absl::StatusOr<std::string> cert_pem = ReadRegularFile("tls_cert", files.cert);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = ReadRegularFile("tls_key", files.key);
  if (!key_pem.ok()) return key_pem.status();
  auto cert = FirstCertificate("tls_cert", files.cert, *cert_pem);
  if (!cert.ok()) return cert.status();

  Bio key_bio = MemoryBio(*key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key: '", files.key,
        "' holds no unencrypted PEM private key (expected a '-----BEGIN PRIVATE KEY-----' "
        "block)"));
  }
  const int match = X509_check_private_key(cert->get(), key.get());
  ERR_clear_error();
  if (match != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_key: '", files.key,
                                                   "' does not match the certificate in '",
                                                   files.cert, "'"));
  }

  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  if (!files.client_ca.empty()) {
    absl::StatusOr<std::string> ca_pem = ReadRegularFile("tls_client_ca", files.client_ca);
    if (!ca_pem.ok()) return ca_pem.status();
    auto ca = FirstCertificate("tls_client_ca", files.client_ca, *ca_pem);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca_pem;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return ssl;
}

}  // namespace octopipe::planner

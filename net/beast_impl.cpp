// Beast compiled once for the whole program (BOOST_BEAST_SEPARATE_COMPILATION).
#include <boost/beast/src.hpp>
// Asio's SSL stream, compiled once as the rest of Asio is (BOOST_ASIO_SEPARATE_COMPILATION).
#include <boost/asio/ssl/impl/src.hpp>

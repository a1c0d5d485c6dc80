// Asio compiled once for the whole program (BOOST_ASIO_SEPARATE_COMPILATION): every other
// translation unit includes only Asio's declarations, which keeps builds on 2 cores bearable.
#include <boost/asio/impl/src.hpp>

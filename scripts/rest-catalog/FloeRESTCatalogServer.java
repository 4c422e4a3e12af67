/*
 * Runs Iceberg's REST catalog test server (RESTCatalogServer's adapter and servlet, from the
 * iceberg-core tests and iceberg-open-api test-fixtures jars) on a given host and port.
 *
 * RESTCatalogServer itself takes its port from the `rest.port` catalog property and always
 * listens on every interface; this launcher binds only the address it is given, so a test
 * server is reachable exactly where the caller wants it (loopback, or a kind network gateway).
 * It lives in org.apache.iceberg.rest because the adapter and the catalog context it builds on
 * are package-private there.
 *
 * Usage: java -cp 'lib/*' org.apache.iceberg.rest.FloeRESTCatalogServer HOST PORT
 * The backend catalog comes from the CATALOG_* environment variables, read as RESTCatalogServer
 * reads them (CATALOG_URI -> uri, CATALOG_IO__IMPL -> io-impl, CATALOG_S3_ENDPOINT -> s3.endpoint).
 */
package org.apache.iceberg.rest;

import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public final class FloeRESTCatalogServer {
  private FloeRESTCatalogServer() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: FloeRESTCatalogServer HOST PORT");
      System.exit(2);
    }
    String host = args[0];
    int port = Integer.parseInt(args[1]);

    Map<String, String> properties = new HashMap<>(RCKUtils.environmentCatalogConfig());
    properties.putIfAbsent(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    properties.putIfAbsent("jdbc.schema-version", "V1");
    for (String required : new String[] {CatalogProperties.URI, CatalogProperties.WAREHOUSE_LOCATION}) {
      if (!properties.containsKey(required)) {
        System.err.println("catalog property '" + required + "' is not set (CATALOG_* environment)");
        System.exit(2);
      }
    }
    String name = properties.getOrDefault("catalog.name", "rest_backend");
    Catalog backend = CatalogUtil.buildIcebergCatalog(name, properties, new Configuration());
    RESTCatalogAdapter adapter =
        new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(backend, properties));

    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    // No CompressionHandler, unlike RESTCatalogServer: Jetty 12.1 appends "--gzip" to a compressed
    // response's ETag and the servlet sees the If-None-Match that comes back with it, so a client
    // that accepts gzip (pyiceberg, Iceberg Java) would never get the 304 of an unchanged table.

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(host);
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(context);
    server.setStopAtShutdown(true);
    server.start();
    System.err.println("floe REST catalog listening on http://" + host + ":" + port + "/");
    server.join();
  }
}

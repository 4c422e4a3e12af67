// The chart's Grafana dashboard drawn with Grafana's own panel components from @grafana/ui and
// @grafana/data (Apache-2.0): PanelChrome, TimeSeries (uPlot), BigValue in a VizRepeater, Grafana's
// dark theme, value formats and legends. Grafana's server (AGPL) cannot run here, so
// tests/dashboard_preview.py answers the panels' queries from a real Prometheus and hands this page
// the series in window.FLOE_BOARD; the page says on its face what drew it.
import React, { Component, ReactNode, useEffect } from 'react';
import { createRoot } from 'react-dom/client';
import {
  applyFieldOverrides,
  createTheme,
  DataFrame,
  dateTime,
  FieldConfigOptionsRegistry,
  FieldDisplay,
  FieldType,
  getDisplayValueAlignmentFactors,
  getFieldDisplayValues,
  ThemeContext,
  TimeRange,
  VizOrientation,
} from '@grafana/data';
import { LegendDisplayMode, LegendPlacement } from '@grafana/schema';
import {
  BigValue,
  BigValueColorMode,
  BigValueGraphMode,
  BigValueJustifyMode,
  BigValueTextMode,
  GlobalStyles,
  PanelChrome,
  TimeSeries,
  VizRepeater,
} from '@grafana/ui';

interface Series {
  name: string;
  times: number[];
  values: Array<number | null>;
}
interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { x: number; y: number; w: number; h: number };
  fieldConfig?: { defaults?: Record<string, any> };
  options?: Record<string, any>;
  series: Series[];
}
interface Board {
  title: string;
  source: string;
  from: number;
  to: number;
  width: number;
  variables: Record<string, string>;
  panels: Panel[];
}

const board: Board = (window as any).FLOE_BOARD;
const theme = createTheme({ colors: { mode: 'dark' } });
const timeRange: TimeRange = {
  from: dateTime(board.from),
  to: dateTime(board.to),
  raw: { from: dateTime(board.from), to: dateTime(board.to) },
};
const noVariables = (value: string) => value;

// Grafana's grid (react-grid-layout with 24 columns, rows of 30 px, 8 px between panels), inside
// the page's padding.
const COLUMNS = 24;
const ROW_PX = 30;
const GAP_PX = 8;
const PAD_PX = 16;
const HEADER_PX = 56;
const columnPx = (board.width - 2 * PAD_PX - GAP_PX * (COLUMNS - 1)) / COLUMNS;
function place(grid: Panel['gridPos']) {
  return {
    left: Math.round(PAD_PX + (columnPx + GAP_PX) * grid.x),
    top: Math.round(HEADER_PX + (ROW_PX + GAP_PX) * grid.y),
    width: Math.round(columnPx * grid.w + GAP_PX * (grid.w - 1)),
    height: Math.round(ROW_PX * grid.h + GAP_PX * (grid.h - 1)),
  };
}

// The timeseries panel's field defaults as Grafana's panel editor saves them; a dashboard's own
// fieldConfig.defaults.custom overrides each.
const LINE_DEFAULTS = {
  drawStyle: 'line',
  lineInterpolation: 'linear',
  lineWidth: 1,
  fillOpacity: 0,
  gradientMode: 'none',
  showPoints: 'auto',
  pointSize: 5,
  spanNulls: false,
  axisPlacement: 'auto',
  barAlignment: 0,
  stacking: { mode: 'none', group: 'A' },
  hideFrom: { legend: false, tooltip: false, viz: false },
  thresholdsStyle: { mode: 'off' },
  scaleDistribution: { type: 'linear' },
};

// One frame per series, as Grafana's Prometheus data source answers a range query, with the
// panel's field config applied (unit, colour, min/max, the line's style).
function framesOf(panel: Panel, custom?: Record<string, unknown>): DataFrame[] {
  const defaults = panel.fieldConfig?.defaults ?? {};
  const frames: DataFrame[] = panel.series.map((series) => ({
    name: series.name,
    length: series.times.length,
    fields: [
      { name: 'Time', type: FieldType.time, values: series.times, config: {} },
      {
        name: 'Value',
        type: FieldType.number,
        values: series.values,
        config: {
          color: { mode: 'palette-classic' },
          ...defaults,
          displayNameFromDS: series.name,
          custom: custom && { ...custom, ...(defaults.custom ?? {}) },
        },
      },
    ],
  }));
  return applyFieldOverrides({
    data: frames,
    fieldConfig: { defaults: {}, overrides: [] },
    fieldConfigRegistry: new FieldConfigOptionsRegistry(),
    replaceVariables: noVariables,
    theme,
    timeZone: 'utc',
  });
}

function TimeSeriesPanel({ panel, width, height }: { panel: Panel; width: number; height: number }) {
  const legend = panel.options?.legend ?? {};
  return (
    <TimeSeries
      frames={framesOf(panel, LINE_DEFAULTS)}
      width={width}
      height={height}
      timeRange={timeRange}
      timeZone="utc"
      legend={{
        showLegend: legend.showLegend ?? true,
        displayMode: legend.displayMode ?? LegendDisplayMode.List,
        placement: (legend.placement ?? 'bottom') as LegendPlacement,
        calcs: legend.calcs ?? [],
      }}
    />
  );
}

function StatPanel({ panel, width, height }: { panel: Panel; width: number; height: number }) {
  const options = panel.options ?? {};
  const graphMode = options.graphMode ?? BigValueGraphMode.Area;
  const values = () =>
    getFieldDisplayValues({
      data: framesOf(panel),
      reduceOptions: options.reduceOptions ?? { calcs: ['lastNotNull'] },
      fieldConfig: { defaults: {}, overrides: [] },
      replaceVariables: noVariables,
      theme,
      timeZone: 'utc',
      timeRange,
      sparkline: graphMode !== BigValueGraphMode.None,
    });
  return (
    <VizRepeater<FieldDisplay, ReturnType<typeof getDisplayValueAlignmentFactors>>
      source={panel}
      getValues={values}
      getAlignmentFactors={getDisplayValueAlignmentFactors}
      renderCounter={0}
      width={width}
      height={height}
      itemSpacing={3}
      orientation={options.orientation ?? VizOrientation.Auto}
      minVizHeight={options.minVizHeight ?? 75}
      minVizWidth={options.minVizWidth ?? 75}
      renderValue={({ value, width: w, height: h, alignmentFactors, count }) => (
        <BigValue
          theme={theme}
          value={value.display}
          sparkline={value.sparkline}
          width={w}
          height={h}
          count={count}
          alignmentFactors={alignmentFactors}
          colorMode={options.colorMode ?? BigValueColorMode.Value}
          graphMode={graphMode}
          justifyMode={options.justifyMode ?? BigValueJustifyMode.Auto}
          textMode={options.textMode ?? BigValueTextMode.Auto}
          text={options.text}
        />
      )}
    />
  );
}

const PANELS: Record<string, typeof TimeSeriesPanel> = { timeseries: TimeSeriesPanel, stat: StatPanel };

function PanelBody({ panel, width, height }: { panel: Panel; width: number; height: number }) {
  const Drawn = PANELS[panel.type];
  if (!Drawn) {
    throw new Error(`no component draws a panel of type ${panel.type} ("${panel.title}")`);
  }
  if (panel.series.length === 0) {
    return <div style={{ display: 'flex', height, alignItems: 'center', justifyContent: 'center' }}>No data</div>;
  }
  return <Drawn panel={panel} width={width} height={height} />;
}

// A panel that fails to draw fails the page: its error is logged (the browser test reads the
// console) and shown where the panel would be.
class PanelError extends Component<{ children: ReactNode }, { error?: Error }> {
  state: { error?: Error } = {};
  static getDerivedStateFromError(error: Error) {
    return { error };
  }
  componentDidCatch(error: Error) {
    console.error(`floe dashboard: ${error.message}`);
  }
  render() {
    return this.state.error ? <pre className="floe-panel-error">{this.state.error.message}</pre> : this.props.children;
  }
}

function Header() {
  const muted = theme.colors.text.secondary;
  return (
    <header style={{ height: HEADER_PX, display: 'flex', alignItems: 'center', gap: 16, padding: `0 ${PAD_PX}px` }}>
      <h1 style={{ fontSize: theme.typography.h4.fontSize, margin: 0 }}>{board.title}</h1>
      {Object.entries(board.variables).map(([name, value]) => (
        <span
          key={name}
          style={{ border: `1px solid ${theme.colors.border.medium}`, padding: '4px 8px', whiteSpace: 'nowrap' }}
        >
          <span style={{ color: muted }}>{name}</span> {value}
        </span>
      ))}
      <span
        className="floe-note"
        style={{ marginLeft: 'auto', color: muted, fontSize: theme.typography.bodySmall.fontSize, textAlign: 'right' }}
      >
        Drawn from {board.source} with Grafana&apos;s panel components (@grafana/ui) on Prometheus&apos; answers;
        not a screenshot of the Grafana server
      </span>
    </header>
  );
}

function Dashboard() {
  useEffect(() => {
    // uPlot draws on the next frames; the photograph waits for this mark.
    requestAnimationFrame(() => requestAnimationFrame(() => (document.body.dataset.drawn = 'yes')));
  }, []);
  const boxes = board.panels.map((panel) => place(panel.gridPos));
  const bottom = Math.max(...boxes.map((box) => box.top + box.height));
  return (
    <ThemeContext.Provider value={theme}>
      <GlobalStyles />
      <div style={{ position: 'relative', width: board.width, height: bottom + PAD_PX }}>
        <Header />
        {board.panels.map((panel, index) => {
          const box = boxes[index];
          const style = { position: 'absolute' as const, ...box };
          if (panel.type === 'row') {
            return (
              <div key={panel.id} className="floe-row" style={{ ...style, display: 'flex', alignItems: 'center' }}>
                <span style={{ fontSize: theme.typography.h5.fontSize, fontWeight: theme.typography.fontWeightMedium }}>
                  {panel.title}
                </span>
              </div>
            );
          }
          return (
            <div key={panel.id} className="floe-panel" data-panel-id={panel.id} style={style}>
              <PanelChrome title={panel.title} width={box.width} height={box.height}>
                {(width, height) => (
                  <PanelError>
                    <PanelBody panel={panel} width={width} height={height} />
                  </PanelError>
                )}
              </PanelChrome>
            </div>
          );
        })}
      </div>
    </ThemeContext.Provider>
  );
}

createRoot(document.getElementById('board')!).render(<Dashboard />);
